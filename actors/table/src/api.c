/*
 * Client side of the table actor: request builders, reply decoding into
 * troupe_rows, and the blocking twins. A call looks the table up, packs
 * the request and asks the actor through troupe_runtime_ask, whose
 * callback runs on scheduler 0; the twins wait for that callback on a
 * condition variable (so they must not run on scheduler 0's thread).
 */
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/pack.h"

void
troupe_rows_destroy(troupe_rows *r)
{
    if (r == NULL)
        return;
    troupe_body_release(r->body_);
    troupe_free(r);
}

/* [[[key, expires, doc], ...], cursor|nil, more]; pointers into body. */
static troupe_err
rows_decode(troupe_body *body, troupe_rows **out)
{
    troupe_reader r;
    uint32_t n = 0;
    troupe_reader_init(&r, troupe_body_data(body), troupe_body_len(body));
    troupe_read_array_n(&r, 3);
    troupe_read_array(&r, &n);
    if (r.err != TROUPE_OK || n > TROUPE_TABLE_PAGE_MAX)
        return TROUPE_EPROTO;
    troupe_rows *rows =
        troupe_calloc(1, sizeof(*rows) + n * sizeof(troupe_row));
    if (rows == NULL)
        return TROUPE_ENOMEM;
    troupe_row *v = (troupe_row *)(rows + 1);
    for (uint32_t i = 0; i < n; i++) {
        const void *p;
        troupe_read_array_n(&r, 3);
        troupe_read_bin(&r, TROUPE_KEY_MAX, &p, &v[i].key_len);
        v[i].key = p;
        troupe_read_int(&r, &v[i].expires_at_ms);
        if (troupe_read_peek(&r) != TROUPE_MP_MAP)
            r.err = TROUPE_EPROTO;
        troupe_read_raw(&r, &p, &v[i].doc_len);
        v[i].doc = p;
    }
    if (!troupe_read_try_nil(&r)) {
        const void *p;
        troupe_read_bin(&r, TROUPE_KEY_MAX, &p, &rows->cursor_len);
        rows->cursor = p;
    }
    troupe_read_bool(&r, &rows->more);
    if (troupe_read_end(&r) != TROUPE_OK) {
        troupe_free(rows);
        return TROUPE_EPROTO;
    }
    rows->n = n;
    rows->rows = v;
    rows->body_ = troupe_body_retain(body);
    *out = rows;
    return TROUPE_OK;
}

troupe_err
troupe__rows_from_body(troupe_body *body, troupe_rows **out)
{
    return rows_decode(body, out);
}

typedef struct tcall {
    troupe_table_cb cb;
    void *arg;
} tcall;

static void
on_reply(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    tcall *c = arg;
    troupe_rows *rows = NULL;
    if (err == TROUPE_OK && reply != NULL && reply->body != NULL)
        err = rows_decode(reply->body, &rows);
    troupe_table_cb cb = c->cb;
    void *cb_arg = c->arg;
    troupe_free(c);
    cb(err, rows, cb_arg);
}

/* Sends *p (fini'd either way) as a request of `kind` to `table`. */
static troupe_err
call(troupe_tables *t, const char *table, troupe_packer *p, uint32_t kind,
     troupe_table_cb cb, void *arg)
{
    troupe_addr a;
    uint32_t timeout;
    troupe_runtime *rt;
    troupe_err e = cb == NULL ? TROUPE_EINVAL : p->err;
    if (e == TROUPE_OK)
        e = troupe__tables_lookup(t, table, &a, &timeout, &rt);
    troupe_msg *m = NULL;
    if (e == TROUPE_OK)
        e = troupe_pack_take_msg(p, kind, &m);
    troupe_pack_fini(p);
    if (e != TROUPE_OK)
        return e;
    tcall *c = troupe_malloc(sizeof(*c));
    if (c == NULL) {
        troupe_msg_destroy(m);
        return TROUPE_ENOMEM;
    }
    c->cb = cb;
    c->arg = arg;
    e = troupe_runtime_ask(rt, a, &m, timeout, on_reply, c);
    if (e != TROUPE_OK)
        troupe_free(c);
    return e;
}

static troupe_err
check_key(const void *key, size_t klen)
{
    if (key == NULL || klen == 0)
        return TROUPE_EINVAL;
    return klen > TROUPE_KEY_MAX ? TROUPE_ETOOBIG : TROUPE_OK;
}

static troupe_err
write_req(troupe_tables *t, const char *table, uint32_t kind, const void *key,
          size_t klen, const void *doc, size_t dlen,
          const troupe_write_opts *wo, troupe_table_cb cb, void *arg)
{
    troupe_write_opts o = wo != NULL ? *wo : (troupe_write_opts){0};
    troupe_err e = check_key(key, klen);
    if (e != TROUPE_OK)
        return e;
    if (t == NULL || (kind != TABLE_DELETE && doc == NULL) ||
        o.expires_at_ms < 0 || (unsigned)o.sync > TROUPE_SYNC_OFF)
        return TROUPE_EINVAL;
    if (dlen > TROUPE_VALUE_MAX)
        return TROUPE_ETOOBIG;
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, kind == TABLE_DELETE ? 2 : 4);
    troupe_pack_bin(&p, key, klen);
    if (kind != TABLE_DELETE) {
        troupe_pack_raw(&p, doc, dlen);
        troupe_pack_int(&p, o.expires_at_ms);
    }
    troupe_pack_uint(&p, (uint64_t)o.sync);
    return call(t, table, &p, kind, cb, arg);
}

troupe_err
troupe_table_insert(troupe_tables *t, const char *table, const void *key,
                    size_t klen, const void *doc, size_t dlen,
                    const troupe_write_opts *wo, troupe_table_cb cb, void *arg)
{
    return write_req(t, table, TABLE_INSERT, key, klen, doc, dlen, wo, cb, arg);
}

troupe_err
troupe_table_update(troupe_tables *t, const char *table, const void *key,
                    size_t klen, const void *doc, size_t dlen,
                    const troupe_write_opts *wo, troupe_table_cb cb, void *arg)
{
    return write_req(t, table, TABLE_UPDATE, key, klen, doc, dlen, wo, cb, arg);
}

troupe_err
troupe_table_upsert(troupe_tables *t, const char *table, const void *key,
                    size_t klen, const void *doc, size_t dlen,
                    const troupe_write_opts *wo, troupe_table_cb cb, void *arg)
{
    return write_req(t, table, TABLE_UPSERT, key, klen, doc, dlen, wo, cb, arg);
}

troupe_err
troupe_table_delete(troupe_tables *t, const char *table, const void *key,
                    size_t klen, const troupe_write_opts *wo,
                    troupe_table_cb cb, void *arg)
{
    return write_req(t, table, TABLE_DELETE, key, klen, NULL, 0, wo, cb, arg);
}

troupe_err
troupe_table_get(troupe_tables *t, const char *table, const void *key,
                 size_t klen, troupe_table_cb cb, void *arg)
{
    troupe_err e = check_key(key, klen);
    if (e != TROUPE_OK)
        return e;
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 1);
    troupe_pack_bin(&p, key, klen);
    return call(t, table, &p, TABLE_GET, cb, arg);
}

troupe_err
troupe_table_get_many(troupe_tables *t, const char *table,
                      const void *const *keys, const size_t *klens, size_t n,
                      troupe_table_cb cb, void *arg)
{
    if (keys == NULL || klens == NULL || n == 0 || n > TROUPE_TABLE_PAGE_MAX)
        return TROUPE_EINVAL;
    for (size_t i = 0; i < n; i++) {
        troupe_err e = check_key(keys[i], klens[i]);
        if (e != TROUPE_OK)
            return e;
    }
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 1);
    troupe_pack_array(&p, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        troupe_pack_bin(&p, keys[i], klens[i]);
    return call(t, table, &p, TABLE_GET_MANY, cb, arg);
}

static void
pack_opt_bin(troupe_packer *p, const void *b, size_t n)
{
    if (b == NULL)
        troupe_pack_nil(p);
    else
        troupe_pack_bin(p, b, n);
}

static int
bcmp_len(const void *a, size_t alen, const void *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c != 0 ? c : (alen > blen) - (alen < blen);
}

troupe_err
troupe_table_scan(troupe_tables *t, const char *table,
                  const troupe_scan_opts *so, troupe_table_cb cb, void *arg)
{
    if (so == NULL || so->limit == 0 || so->limit > TROUPE_TABLE_PAGE_MAX)
        return TROUPE_EINVAL;
    if ((so->start == NULL) != (so->start_len == 0) ||
        (so->end == NULL) != (so->end_len == 0) ||
        (so->after == NULL) != (so->after_len == 0))
        return TROUPE_EINVAL;
    if (so->start_len > TROUPE_KEY_MAX || so->end_len > TROUPE_KEY_MAX ||
        so->after_len > TROUPE_KEY_MAX)
        return TROUPE_ETOOBIG;
    if (so->start != NULL && so->end != NULL &&
        bcmp_len(so->start, so->start_len, so->end, so->end_len) > 0)
        return TROUPE_EINVAL;
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 5);
    pack_opt_bin(&p, so->start, so->start_len);
    pack_opt_bin(&p, so->end, so->end_len);
    pack_opt_bin(&p, so->after, so->after_len);
    troupe_pack_uint(&p, so->limit);
    troupe_pack_bool(&p, so->reverse);
    return call(t, table, &p, TABLE_SCAN, cb, arg);
}

/* ---- blocking twins ---------------------------------------------------- */

void
troupe__twaiter_init(twaiter *w)
{
    uv_mutex_init(&w->mu);
    uv_cond_init(&w->cv);
    w->done = 0;
    w->err = TROUPE_OK;
    w->rows = NULL;
}

void
troupe__twaiter_wake(twaiter *w, troupe_err err, troupe_rows *rows)
{
    uv_mutex_lock(&w->mu);
    w->err = err;
    w->rows = rows;
    w->done = 1;
    uv_cond_signal(&w->cv);
    uv_mutex_unlock(&w->mu);
}

troupe_err
troupe__twaiter_wait(twaiter *w, troupe_rows **rows)
{
    uv_mutex_lock(&w->mu);
    while (!w->done)
        uv_cond_wait(&w->cv, &w->mu);
    uv_mutex_unlock(&w->mu);
    uv_cond_destroy(&w->cv);
    uv_mutex_destroy(&w->mu);
    if (rows != NULL)
        *rows = w->rows;
    else
        troupe_rows_destroy(w->rows);
    return w->err;
}

static void
wake_cb(troupe_err err, troupe_rows *rows, void *arg)
{
    troupe__twaiter_wake(arg, err, rows);
}

/* Waits for a started call, or cleans up one that failed to start. */
static troupe_err
finish(twaiter *w, troupe_err started, troupe_rows **rows)
{
    if (rows != NULL)
        *rows = NULL;
    if (started != TROUPE_OK) {
        troupe__twaiter_wake(w, started, NULL);
        troupe__twaiter_wait(w, NULL);
        return started;
    }
    return troupe__twaiter_wait(w, rows);
}

troupe_err
troupe_table_insert_wait(troupe_tables *t, const char *table, const void *key,
                         size_t klen, const void *doc, size_t dlen,
                         const troupe_write_opts *wo)
{
    twaiter w;
    troupe__twaiter_init(&w);
    return finish(
        &w,
        troupe_table_insert(t, table, key, klen, doc, dlen, wo, wake_cb, &w),
        NULL);
}

troupe_err
troupe_table_update_wait(troupe_tables *t, const char *table, const void *key,
                         size_t klen, const void *doc, size_t dlen,
                         const troupe_write_opts *wo)
{
    twaiter w;
    troupe__twaiter_init(&w);
    return finish(
        &w,
        troupe_table_update(t, table, key, klen, doc, dlen, wo, wake_cb, &w),
        NULL);
}

troupe_err
troupe_table_upsert_wait(troupe_tables *t, const char *table, const void *key,
                         size_t klen, const void *doc, size_t dlen,
                         const troupe_write_opts *wo)
{
    twaiter w;
    troupe__twaiter_init(&w);
    return finish(
        &w,
        troupe_table_upsert(t, table, key, klen, doc, dlen, wo, wake_cb, &w),
        NULL);
}

troupe_err
troupe_table_delete_wait(troupe_tables *t, const char *table, const void *key,
                         size_t klen, const troupe_write_opts *wo)
{
    twaiter w;
    troupe__twaiter_init(&w);
    return finish(&w, troupe_table_delete(t, table, key, klen, wo, wake_cb, &w),
                  NULL);
}

troupe_err
troupe_table_get_wait(troupe_tables *t, const char *table, const void *key,
                      size_t klen, troupe_rows **rows)
{
    if (rows == NULL)
        return TROUPE_EINVAL;
    twaiter w;
    troupe__twaiter_init(&w);
    return finish(&w, troupe_table_get(t, table, key, klen, wake_cb, &w), rows);
}

troupe_err
troupe_table_get_many_wait(troupe_tables *t, const char *table,
                           const void *const *keys, const size_t *klens,
                           size_t n, troupe_rows **rows)
{
    if (rows == NULL)
        return TROUPE_EINVAL;
    twaiter w;
    troupe__twaiter_init(&w);
    return finish(
        &w, troupe_table_get_many(t, table, keys, klens, n, wake_cb, &w), rows);
}

troupe_err
troupe_table_scan_wait(troupe_tables *t, const char *table,
                       const troupe_scan_opts *so, troupe_rows **rows)
{
    if (rows == NULL)
        return TROUPE_EINVAL;
    twaiter w;
    troupe__twaiter_init(&w);
    return finish(&w, troupe_table_scan(t, table, so, wake_cb, &w), rows);
}
