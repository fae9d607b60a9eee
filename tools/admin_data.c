/*
 * The admin endpoint's data routes: rows, indexes and the node's kv actor.
 *
 *   GET  /v1/tables/{t}/row?key=|key_hex=        one live row
 *   GET  /v1/tables/{t}/scan?limit=&after=&reverse=1   a page of rows
 *   GET  /v1/tables/{t}/indexes/{i}              ready or building, and
 *                                                the build's progress
 *   POST /v1/tables/{t}/indexes/{i}/rebuild[?wait=0]   rebuild it (waits;
 *                                                wait=0: at once, "building")
 *   GET  /v1/kv?key=|key_hex=                    a kv value
 *   PUT  /v1/kv {"key", "value", "sync"}         store one
 *
 * Keys are bytes: the text of `key` (percent-decoded) or the hex of
 * `key_hex`; in bodies a string or {"hex": "..."}. Documents are shown as
 * JSON (admin_msgpack_to_json), with "doc_error" and the hex when they do
 * not convert; expiry times as ISO 8601.
 */
#include <pthread.h>
#include <stdlib.h>

#include "admin_route.h"
#include "troupe/kv.h"
#include "troupe/pack.h"

/* The kv actor answers within this. */
#define KV_TIMEOUT_MS 10000

static bool
have_tables(const admin_ctx *c, admin_call *call)
{
    if (c->tables != NULL)
        return true;
    admin_error(call, 404, "not_found", "this node serves no tables");
    return false;
}

/* Bytes of query `key` or `key_hex` (exactly one), 1..max: malloc'd, or
 * NULL with 400 answered. */
static uint8_t *
query_key(admin_call *call, size_t max, size_t *len)
{
    bool bad;
    char *k = admin_query(call, "key", &bad);
    if (bad)
        return NULL;
    char *kh = admin_query(call, "key_hex", &bad);
    if (bad) {
        free(k);
        return NULL;
    }
    uint8_t *b = NULL;
    if ((k == NULL) == (kh == NULL)) {
        admin_error(call, 400, "bad_query",
                    "give key or key_hex (one of them)");
    } else if (k != NULL) {
        *len = strlen(k);
        b = (uint8_t *)k;
        k = NULL;
    } else {
        b = admin_unhex(kh, len);
    }
    free(k);
    free(kh);
    if (b != NULL && *len >= 1 && *len <= max)
        return b;
    free(b);
    if (call->json == NULL)
        admin_error(call, 400, "bad_query",
                    "the key wants 1..%zu bytes (key_hex: hex digits)", max);
    return NULL;
}

static json_t *
row_json(const troupe_row *r)
{
    json_t *j = json_pack(
        "{s:o*,s:o}", "key", admin_json_bytes(r->key, r->key_len), "expires",
        r->expires_at_ms ? admin_json_time(r->expires_at_ms) : json_null());
    if (j == NULL)
        return NULL;
    const char *why = NULL;
    json_t *d = admin_msgpack_to_json(r->doc, r->doc_len, &why);
    if (d != NULL) {
        json_object_set_new(j, "doc", d);
    } else {
        char *h = admin_hex(r->doc, r->doc_len);
        json_object_set_new(j, "doc_error", json_string(why));
        json_object_set_new(j, "doc_hex", h ? json_string(h) : json_null());
        free(h);
    }
    return j;
}

/* A failure naming the table (ENOTABLE, ENOINDEX, or ENOENT: no such
 * row). */
static void
table_fail(admin_call *call, const char *what, troupe_err e)
{
    admin_fail(call, e == TROUPE_ENOENT ? "no live row at that key" : what, e);
}

static void
row_route(const admin_ctx *c, admin_call *call)
{
    if (!have_tables(c, call))
        return;
    size_t kl = 0;
    uint8_t *k = query_key(call, TROUPE_KEY_MAX, &kl);
    if (k == NULL)
        return;
    troupe_rows *rows = NULL;
    troupe_err e =
        troupe_table_get_wait(c->tables, call->param[0], k, kl, &rows);
    free(k);
    if (e != TROUPE_OK) {
        table_fail(call, "get", e);
        return;
    }
    admin_ok(call, rows->n == 1 ? row_json(&rows->rows[0]) : NULL);
    troupe_rows_destroy(rows);
}

static void
scan_route(const admin_ctx *c, admin_call *call)
{
    if (!have_tables(c, call))
        return;
    long limit, reverse;
    if (!admin_query_num(call, "limit", 1, TROUPE_TABLE_PAGE_MAX, 100,
                         &limit) ||
        !admin_query_num(call, "reverse", 0, 1, 0, &reverse))
        return;
    bool bad;
    char *after = admin_query(call, "after", &bad);
    if (bad)
        return;
    troupe_scan_opts so = {.limit = (size_t)limit, .reverse = reverse == 1};
    uint8_t *cur = NULL;
    if (after != NULL && (cur = admin_unhex(after, &so.after_len)) == NULL) {
        admin_error(call, 400, "bad_query",
                    "after wants the hex cursor a page gave");
        free(after);
        return;
    }
    free(after);
    so.after = cur;
    troupe_rows *rows = NULL;
    troupe_err e =
        troupe_table_scan_wait(c->tables, call->param[0], &so, &rows);
    free(cur);
    if (e == TROUPE_ERANGE) {
        admin_error(call, 400, "bad_cursor",
                    "after is not a scan cursor of this table");
        return;
    }
    if (e != TROUPE_OK) {
        table_fail(call, "scan", e);
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; arr != NULL && i < rows->n; i++) {
        json_t *r = row_json(&rows->rows[i]);
        if (r == NULL || json_array_append_new(arr, r) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    char *h = rows->n ? admin_hex(rows->cursor, rows->cursor_len) : NULL;
    admin_ok(call, arr ? json_pack("{s:o,s:o,s:b}", "rows", arr, "cursor",
                                   h ? json_string(h) : json_null(), "more",
                                   rows->more)
                       : NULL);
    free(h);
    troupe_rows_destroy(rows);
}

static void
index_route(const admin_ctx *c, admin_call *call)
{
    if (!have_tables(c, call))
        return;
    troupe_index_progress pr;
    troupe_err e = troupe_tables_index_progress_wait(c->tables, call->param[0],
                                                     call->param[1], &pr);
    if (e != TROUPE_OK) {
        admin_fail(call, "index state", e);
        return;
    }
    /* progress: null when no build of it ran since the node opened */
    json_t *p =
        !pr.known
            ? json_null()
            : json_pack("{s:b,s:I,s:I,s:I,s:s*}", "running", pr.running, "rows",
                        (json_int_t)pr.done, "total", (json_int_t)pr.total,
                        "elapsed_ms", (json_int_t)pr.elapsed_ms, "error",
                        pr.err != TROUPE_OK ? troupe_err_name(pr.err) : NULL);
    admin_ok(call,
             json_pack("{s:o*,s:o*,s:I,s:s,s:o*}", "table",
                       admin_json_bytes(call->param[0], call->param_len[0]),
                       "index",
                       admin_json_bytes(call->param[1], call->param_len[1]),
                       "id", (json_int_t)pr.index_id, "state",
                       pr.ready ? "ready" : "building", "progress", p));
}

/* A rebuild nobody waits for: its outcome shows in the index's progress
 * and in the log. */
static void
rebuild_done(troupe_tables *t, troupe_err err, void *arg)
{
    (void)t;
    (void)err;
    (void)arg;
}

static void
rebuild_route(const admin_ctx *c, admin_call *call)
{
    if (!have_tables(c, call))
        return;
    long wait = 1;
    if (!admin_query_num(call, "wait", 0, 1, 1, &wait))
        return;
    if (wait == 0) {
        troupe_err e = troupe_tables_rebuild_index(
            c->tables, call->param[0], call->param[1], rebuild_done, NULL);
        if (e != TROUPE_OK) {
            table_fail(call, "rebuild", e);
            return;
        }
        admin_ok(call, json_pack("{s:s}", "state", "building"));
        return;
    }
    troupe_err e = troupe_tables_rebuild_index_wait(c->tables, call->param[0],
                                                    call->param[1]);
    if (e != TROUPE_OK)
        table_fail(call, "rebuild", e);
    else
        admin_ok(call, json_pack("{s:s}", "state", "ready"));
}

/* ---- kv: asks to the node's kv actor, waited for on this thread ---- */

typedef struct kv_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    troupe_err err;
    uint8_t *val; /* GET: a copy of the value */
    size_t val_len;
} kv_wait;

/* Scheduler 0: copies what it needs, the reply is borrowed. */
static void
kv_reply(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    (void)rt;
    kv_wait *w = arg;
    troupe_reader r;
    const void *v = NULL;
    size_t n = 0;
    if (err == TROUPE_OK && reply != NULL &&
        troupe_reader_init_msg(&r, reply) == TROUPE_OK &&
        troupe_read_peek(&r) == TROUPE_MP_BIN &&
        troupe_read_bin(&r, SIZE_MAX, &v, &n) == TROUPE_OK) {
        if ((w->val = malloc(n ? n : 1)) == NULL)
            err = TROUPE_ENOMEM;
        else
            memcpy(w->val, v, n);
        w->val_len = n;
    }
    pthread_mutex_lock(&w->mu);
    w->err = err;
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static troupe_err
kv_ask(const admin_ctx *c, troupe_msg **m, kv_wait *w)
{
    *w = (kv_wait){.done = false};
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    troupe_err e =
        troupe_runtime_ask(c->rt, c->kv, m, KV_TIMEOUT_MS, kv_reply, w);
    if (e == TROUPE_OK) {
        pthread_mutex_lock(&w->mu);
        while (!w->done)
            pthread_cond_wait(&w->cv, &w->mu);
        pthread_mutex_unlock(&w->mu);
        e = w->err;
    }
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    return e;
}

static bool
have_kv(const admin_ctx *c, admin_call *call)
{
    if (!troupe_addr_is_none(c->kv))
        return true;
    admin_error(call, 404, "not_found", "this node serves no kv actor");
    return false;
}

static void
kv_get_route(const admin_ctx *c, admin_call *call)
{
    if (!have_kv(c, call))
        return;
    size_t kl = 0;
    uint8_t *k = query_key(call, TROUPE_KEY_MAX, &kl);
    if (k == NULL)
        return;
    troupe_msg *m = NULL;
    troupe_err e = troupe_kv_get_msg(k, kl, &m);
    kv_wait w;
    if (e == TROUPE_OK)
        e = kv_ask(c, &m, &w);
    if (e == TROUPE_ENOENT) {
        admin_error(call, 404, "not_found", "no value at that key");
    } else if (e != TROUPE_OK) {
        admin_fail(call, "kv get", e);
    } else {
        admin_ok(call, json_pack("{s:o*,s:o*}", "key", admin_json_bytes(k, kl),
                                 "value", admin_json_bytes(w.val, w.val_len)));
        free(w.val);
    }
    free(k);
}

static void
kv_put_route(const admin_ctx *c, admin_call *call)
{
    if (!have_kv(c, call))
        return;
    json_t *o = admin_body_object(call);
    if (o == NULL)
        return;
    json_t *sync = json_object_get(o, "sync");
    if (sync != NULL && !json_is_boolean(sync)) {
        admin_error(call, 400, "bad_field",
                    "field \"sync\" wants true or "
                    "false");
        json_decref(o);
        return;
    }
    size_t kl = 0, vl = 0;
    uint8_t *k = admin_field_bytes(call, o, "key", TROUPE_KEY_MAX, &kl);
    uint8_t *v =
        k ? admin_field_bytes(call, o, "value", ADMIN_BODY_MAX, &vl) : NULL;
    bool sy = sync == NULL || json_is_true(sync);
    json_decref(o);
    if (v != NULL) {
        troupe_msg *m = NULL;
        kv_wait w;
        troupe_err e = troupe_kv_put_msg(k, kl, v, vl, sy, &m);
        if (e == TROUPE_OK)
            e = kv_ask(c, &m, &w);
        if (e != TROUPE_OK)
            admin_fail(call, "kv put", e);
        else
            admin_ok(call, json_pack("{s:b}", "ok", true));
    }
    free(k);
    free(v);
}

const admin_route admin_data_routes[] = {
    {"GET", "/v1/tables/{}/row", row_route},
    {"GET", "/v1/tables/{}/scan", scan_route},
    {"GET", "/v1/tables/{}/indexes/{}", index_route},
    {"POST", "/v1/tables/{}/indexes/{}/rebuild", rebuild_route},
    {"GET", "/v1/kv", kv_get_route},
    {"PUT", "/v1/kv", kv_put_route},
    {NULL, NULL, NULL},
};
