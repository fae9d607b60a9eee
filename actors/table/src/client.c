/*
 * The client calls of table.h: write requests, direct reads (read.c on
 * the caller's thread), and the blocking twins; replies are decoded into
 * troupe_rows by rows.c. No state. A call looks the table up, packs
 * the request and asks the actor through troupe_runtime_ask, whose
 * callback runs on scheduler 0; the twins wait for that callback on a
 * condition variable (so they must not run on scheduler 0's thread).
 * Each call that returns OK adds its latency, from the call to just before
 * its callback, to ttables_shared's histograms: one clock read at each end
 * and a relaxed add, nothing else on the path.
 */
#include <inttypes.h>
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/runtime.h"
#include "troupe/internal/xa.h"
#include "troupe/pack.h"

typedef struct tcall {
    troupe_table_cb cb;
    void *arg;
    uint64_t table_id; /* a scan's: its cursor names the table */
    ttables_shared *ts;
    int op;      /* TTABLES_OP_* */
    uint64_t t0; /* when the call began */
} tcall;

static void
on_reply(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    tcall *c = arg;
    troupe_rows *rows = NULL;
    if (err == TROUPE_OK && reply != NULL && reply->body != NULL)
        err = troupe__rows_from_body(reply->body, &rows);
    if (err == TROUPE_OK && rows != NULL && c->table_id != 0 &&
        (err = troupe__rows_cursor_wrap(rows, c->table_id)) != TROUPE_OK) {
        troupe_rows_destroy(rows);
        rows = NULL;
    }
    if (err == TROUPE_EBUSY && reply != NULL && reply->body != NULL) {
        /* a write refused for a prepared XA xid's key (write.c): the
         * callback runs on this thread and may read the detail */
        troupe_reader r;
        const char *xid = NULL;
        size_t xl = 0;
        troupe_reader_init(&r, troupe_body_data(reply->body),
                           troupe_body_len(reply->body));
        troupe_read_str(&r, TROUPE__XA_XID_MAX, &xid, &xl);
        if (troupe_read_end(&r) == TROUPE_OK && troupe__xa_xid_valid(xid, xl))
            troupe__errf(TROUPE_EBUSY,
                         "the key is held by prepared XA transaction "
                         "\"%.*s\"",
                         (int)xl, xid);
    }
    troupe_table_cb cb = c->cb;
    void *cb_arg = c->arg;
    troupe__tables_op_done(c->ts, c->op, c->t0);
    troupe_free(c);
    cb(err, rows, cb_arg);
}

/* The latency class of a request kind. */
static int
kind_op(uint32_t kind)
{
    return kind == TABLE_SCAN                            ? TTABLES_OP_SCAN
           : kind == TABLE_GET || kind == TABLE_GET_MANY ? TTABLES_OP_GET
                                                         : TTABLES_OP_WRITE;
}

/* Sends *p (fini'd either way) as a request of `kind` to `table`; a scan
 * of table `table_id` (else 0) gets its cursor wrapped. The call began at
 * t0 (troupe__tables_op_clock). */
static troupe_err
call(troupe_tables *t, const char *table, troupe_packer *p, uint32_t kind,
     uint64_t table_id, uint64_t t0, troupe_table_cb cb, void *arg)
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
    c->table_id = table_id;
    c->ts = &t->ts;
    c->op = kind_op(kind);
    c->t0 = t0;
    e = troupe_runtime_ask(rt, a, &m, timeout, on_reply, c);
    if (e != TROUPE_OK)
        troupe_free(c);
    return e;
}

/* ---- reads without the actor ------------------------------------------- */

/*
 * Reads need no serialisation with the table's writes (a read sees what
 * is committed, on any thread), so they run where they are called: a
 * blocking twin reads on the caller's thread; an asynchronous call reads
 * memory only (memtables and block cache) on the caller's thread and
 * posts its callback to scheduler 0, and only a read that needs the disk
 * goes to the table actor, which runs it on a worker. The row family's
 * handle stays valid until the db closes (a dropped table reads as
 * ENOENT), and troupe_tables outlives every call.
 */
typedef struct tdirect {
    troupe_table_cb cb;
    void *arg;
    troupe_err err;
    troupe_rows *rows;
    ttables_shared *ts;
    int op;
    uint64_t t0;
} tdirect;

static void
direct_done(void *arg, troupe_runtime *rt)
{
    (void)rt;
    tdirect *d = arg;
    troupe_table_cb cb = d->cb;
    void *cb_arg = d->arg;
    troupe_err err = d->err;
    troupe_rows *rows = d->rows;
    troupe__tables_op_done(d->ts, d->op, d->t0);
    troupe_free(d);
    cb(err, rows, cb_arg);
}

/* One read's arguments, kept so that a read that needs the disk can still
 * be sent to the actor. */
typedef struct treq {
    uint32_t kind;
    const void *key; /* TABLE_GET */
    size_t klen;
    const void *const *keys; /* TABLE_GET_MANY */
    const size_t *klens;
    size_t n;
    const troupe_scan_opts *so; /* TABLE_SCAN */
} treq;

/* Runs q on this thread: OK with the read's own outcome in *rerr (and
 * *rows on success), or the error that stops the call (EAGAIN: cached
 * and the disk is needed; *raw, *id are then what the actor is sent: the
 * scan with its cursor's key, and the table's id). A scan's cursor must
 * be one of this table: ERANGE otherwise, at the call. */
static troupe_err
read_here(troupe_tables *t, const char *table, const treq *q, bool cached,
          troupe_runtime **rt, troupe_err *rerr, troupe_rows **rows,
          troupe_scan_opts *raw, uint64_t *id)
{
    tread_env env;
    *rows = NULL;
    troupe_err e = troupe__tables_read_env(t, table, &env);
    if (e == TROUPE_OK && q->kind == TABLE_SCAN)
        e = troupe__scan_cursor_unwrap(q->so, env.table_id, raw);
    if (e != TROUPE_OK)
        return e;
    tread_src src = {.db = env.db,
                     .cf = env.cf_t,
                     .cached = cached,
                     .now = env.clock(env.clock_ctx)};
    *rt = env.rt;
    *id = env.table_id;
    if (q->kind == TABLE_GET)
        e = troupe__read_get(&src, q->key, q->klen, rows);
    else if (q->kind == TABLE_GET_MANY)
        e = troupe__read_get_many(&src, q->keys, q->klens, q->n, rows);
    else
        e = troupe__read_scan(&src, raw, rows);
    if (e == TROUPE_EAGAIN && cached)
        return e;
    if (e == TROUPE_OK && q->kind == TABLE_SCAN &&
        (e = troupe__rows_cursor_wrap(*rows, env.table_id)) != TROUPE_OK) {
        troupe_rows_destroy(*rows);
        *rows = NULL;
    }
    *rerr = e;
    return TROUPE_OK;
}

static troupe_err
get_req(troupe_packer *p, const treq *q);

/* An asynchronous read: here from memory, else through the actor. */
static troupe_err
read_call(troupe_tables *t, const char *table, const treq *q,
          troupe_table_cb cb, void *arg)
{
    if (cb == NULL)
        return TROUPE_EINVAL;
    uint64_t t0 = troupe__tables_op_clock();
    troupe_runtime *rt = NULL;
    troupe_err rerr = TROUPE_OK;
    troupe_rows *rows = NULL;
    troupe_scan_opts raw;
    uint64_t id = 0;
    troupe_err e = read_here(t, table, q, true, &rt, &rerr, &rows, &raw, &id);
    if (e == TROUPE_EAGAIN) {
        treq rq = *q;
        if (q->kind == TABLE_SCAN)
            rq.so = &raw; /* the actor reads the key, not the cursor */
        troupe_packer p;
        get_req(&p, &rq);
        return call(t, table, &p, q->kind, q->kind == TABLE_SCAN ? id : 0, t0,
                    cb, arg);
    }
    tdirect *d = e == TROUPE_OK ? troupe_malloc(sizeof(*d)) : NULL;
    if (e == TROUPE_OK && d == NULL)
        e = TROUPE_ENOMEM;
    if (e == TROUPE_OK) {
        *d = (tdirect){cb, arg, rerr, rows, &t->ts, kind_op(q->kind), t0};
        e = troupe_runtime_post(rt, direct_done, d);
    }
    if (e != TROUPE_OK) {
        troupe_free(d);
        troupe_rows_destroy(rows);
    }
    return e;
}

/* A blocking read: on this thread, disk included. */
static troupe_err
read_wait(troupe_tables *t, const char *table, const treq *q,
          troupe_rows **rows)
{
    troupe_runtime *rt = NULL;
    troupe_err rerr = TROUPE_OK;
    troupe_scan_opts raw;
    uint64_t id = 0;
    uint64_t t0 = troupe__tables_op_clock();
    troupe_err e = read_here(t, table, q, false, &rt, &rerr, rows, &raw, &id);
    if (e != TROUPE_OK)
        return e;
    troupe__tables_op_done(&t->ts, kind_op(q->kind), t0);
    return rerr;
}

static void
pack_opt_bin(troupe_packer *p, const void *b, size_t n)
{
    if (b == NULL)
        troupe_pack_nil(p);
    else
        troupe_pack_bin(p, b, n);
}

/* The request body of q for the actor (table_int.h). */
static troupe_err
get_req(troupe_packer *p, const treq *q)
{
    troupe_pack_init(p);
    if (q->kind == TABLE_GET) {
        troupe_pack_array(p, 1);
        troupe_pack_bin(p, q->key, q->klen);
    } else if (q->kind == TABLE_GET_MANY) {
        troupe_pack_array(p, 1);
        troupe_pack_array(p, (uint32_t)q->n);
        for (size_t i = 0; i < q->n; i++)
            troupe_pack_bin(p, q->keys[i], q->klens[i]);
    } else {
        const troupe_scan_opts *so = q->so;
        troupe_pack_array(p, 5);
        pack_opt_bin(p, so->start, so->start_len);
        pack_opt_bin(p, so->end, so->end_len);
        pack_opt_bin(p, so->after, so->after_len);
        troupe_pack_uint(p, so->limit);
        troupe_pack_bool(p, so->reverse);
    }
    return p->err;
}

troupe_err
troupe__table_key_err(const void *key, size_t klen)
{
    if (key == NULL)
        return troupe__errf(TROUPE_EINVAL, "key is NULL");
    if (klen == 0)
        return troupe__errf(TROUPE_EINVAL, "key is empty");
    return troupe__errf(TROUPE_ETOOBIG,
                        "key of %zu bytes over TROUPE_KEY_MAX (%zu)", klen,
                        (size_t)TROUPE_KEY_MAX);
}

/* Checks a read's arguments (the errors the calls return at once). */
static troupe_err
check_req(const treq *q)
{
    if (q->kind == TABLE_GET)
        return troupe__table_key_check(q->key, q->klen);
    if (q->kind == TABLE_GET_MANY) {
        if (q->n == 0)
            return TROUPE_OK; /* an empty result (keys may be NULL) */
        if (q->keys == NULL || q->klens == NULL || q->n > TROUPE_TABLE_PAGE_MAX)
            return TROUPE_EINVAL;
        for (size_t i = 0; i < q->n; i++) {
            troupe_err e = troupe__table_key_check(q->keys[i], q->klens[i]);
            if (e != TROUPE_OK)
                return e;
        }
        return TROUPE_OK;
    }
    return troupe__scan_opts_check(q->so);
}

static troupe_err
write_req(troupe_tables *t, const char *table, uint32_t kind, const void *key,
          size_t klen, const void *doc, size_t dlen,
          const troupe_write_opts *wo, troupe_table_cb cb, void *arg)
{
    uint64_t t0 = troupe__tables_op_clock();
    troupe_write_opts o = wo != NULL ? *wo : (troupe_write_opts){0};
    troupe_err e = troupe__table_key_check(key, klen);
    if (e != TROUPE_OK)
        return e;
    if (t == NULL || (kind != TABLE_DELETE && doc == NULL))
        return TROUPE_EINVAL;
    if (o.expires_at_ms < 0)
        return troupe__errf(TROUPE_EINVAL,
                            "write_opts.expires_at_ms %" PRId64 " is negative",
                            o.expires_at_ms);
    if ((unsigned)o.sync > TROUPE_SYNC_OFF)
        return troupe__errf(TROUPE_EINVAL, "write_opts.sync %d is no sync mode",
                            (int)o.sync);
    if (dlen > TROUPE_VALUE_MAX)
        return troupe__errf(TROUPE_ETOOBIG,
                            "document of %zu bytes over TROUPE_VALUE_MAX (%zu)",
                            dlen, (size_t)TROUPE_VALUE_MAX);
    static const char *const calls[] = {[TABLE_INSERT] = "troupe_table_insert",
                                        [TABLE_UPDATE] = "troupe_table_update",
                                        [TABLE_UPSERT] = "troupe_table_upsert",
                                        [TABLE_DELETE] = "troupe_table_delete"};
    if ((e = troupe__tables_writable(t, calls[kind])) != TROUPE_OK)
        return e;
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, kind == TABLE_DELETE ? 2 : 5);
    troupe_pack_bin(&p, key, klen);
    if (kind != TABLE_DELETE) {
        troupe_pack_raw(&p, doc, dlen);
        troupe_pack_int(&p, o.expires_at_ms);
    }
    troupe_pack_uint(&p, (uint64_t)o.sync);
    if (kind != TABLE_DELETE)
        troupe_pack_bool(&p, !o.no_timestamps);
    return call(t, table, &p, kind, 0, t0, cb, arg);
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

static troupe_err
read_async(troupe_tables *t, const char *table, const treq *q,
           troupe_table_cb cb, void *arg)
{
    troupe_err e = check_req(q);
    return e != TROUPE_OK ? e : read_call(t, table, q, cb, arg);
}

static troupe_err
read_block(troupe_tables *t, const char *table, const treq *q,
           troupe_rows **rows)
{
    if (rows == NULL)
        return TROUPE_EINVAL;
    *rows = NULL;
    troupe_err e = check_req(q);
    return e != TROUPE_OK ? e : read_wait(t, table, q, rows);
}

troupe_err
troupe_table_get(troupe_tables *t, const char *table, const void *key,
                 size_t klen, troupe_table_cb cb, void *arg)
{
    treq q = {.kind = TABLE_GET, .key = key, .klen = klen};
    return read_async(t, table, &q, cb, arg);
}

troupe_err
troupe_table_get_many(troupe_tables *t, const char *table,
                      const void *const *keys, const size_t *klens, size_t n,
                      troupe_table_cb cb, void *arg)
{
    treq q = {.kind = TABLE_GET_MANY, .keys = keys, .klens = klens, .n = n};
    return read_async(t, table, &q, cb, arg);
}

troupe_err
troupe_table_scan(troupe_tables *t, const char *table,
                  const troupe_scan_opts *so, troupe_table_cb cb, void *arg)
{
    treq q = {.kind = TABLE_SCAN, .so = so};
    return read_async(t, table, &q, cb, arg);
}

/* ---- blocking twins ---------------------------------------------------- */

static void
wake_cb(troupe_err err, troupe_rows *rows, void *arg)
{
    troupe__waiter_release(arg, err, rows);
}

/* A write's EBUSY, with the detail naming the prepared XA xid that holds
 * the key (troupe/xa.h) when one does: on the caller's thread, where
 * troupe_errmsg reads it. */
static troupe_err
busy_detail(const char *call, troupe_tables *t, const char *table,
            const void *key, size_t klen, troupe_err e)
{
    char xid[TROUPE__XA_XID_MAX + 1];
    if (e != TROUPE_EBUSY || !troupe__xa_holder(t, table, key, klen, xid))
        return e;
    return troupe__errf(TROUPE_EBUSY,
                        "%s: the key is held by prepared XA transaction "
                        "\"%s\"",
                        call, xid);
}

/* The write calls that take a document, as write_wait waits for them. */
typedef troupe_err (*doc_write_fn)(troupe_tables *t, const char *table,
                                   const void *key, size_t klen,
                                   const void *doc, size_t dlen,
                                   const troupe_write_opts *wo,
                                   troupe_table_cb cb, void *arg);

/* The blocking twin of fn, refused on a troupe thread (call names it). */
static troupe_err
write_wait(const char *call, doc_write_fn fn, troupe_tables *t,
           const char *table, const void *key, size_t klen, const void *doc,
           size_t dlen, const troupe_write_opts *wo)
{
    troupe_err be = troupe__block_check(call);
    if (be != TROUPE_OK)
        return be;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return busy_detail(
        call, t, table, key, klen,
        troupe__waiter_finish(
            &w, fn(t, table, key, klen, doc, dlen, wo, wake_cb, &w), NULL));
}

troupe_err
troupe_table_insert_wait(troupe_tables *t, const char *table, const void *key,
                         size_t klen, const void *doc, size_t dlen,
                         const troupe_write_opts *wo)
{
    return write_wait("troupe_table_insert_wait", troupe_table_insert, t, table,
                      key, klen, doc, dlen, wo);
}

troupe_err
troupe_table_update_wait(troupe_tables *t, const char *table, const void *key,
                         size_t klen, const void *doc, size_t dlen,
                         const troupe_write_opts *wo)
{
    return write_wait("troupe_table_update_wait", troupe_table_update, t, table,
                      key, klen, doc, dlen, wo);
}

troupe_err
troupe_table_upsert_wait(troupe_tables *t, const char *table, const void *key,
                         size_t klen, const void *doc, size_t dlen,
                         const troupe_write_opts *wo)
{
    return write_wait("troupe_table_upsert_wait", troupe_table_upsert, t, table,
                      key, klen, doc, dlen, wo);
}

troupe_err
troupe_table_delete_wait(troupe_tables *t, const char *table, const void *key,
                         size_t klen, const troupe_write_opts *wo)
{
    troupe_err be = troupe__block_check("troupe_table_delete_wait");
    if (be != TROUPE_OK)
        return be;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return busy_detail(
        "troupe_table_delete_wait", t, table, key, klen,
        troupe__waiter_finish(
            &w, troupe_table_delete(t, table, key, klen, wo, wake_cb, &w),
            NULL));
}

troupe_err
troupe_table_get_wait(troupe_tables *t, const char *table, const void *key,
                      size_t klen, troupe_rows **rows)
{
    troupe_err be = troupe__block_check("troupe_table_get_wait");
    if (be != TROUPE_OK)
        return be;
    treq q = {.kind = TABLE_GET, .key = key, .klen = klen};
    return read_block(t, table, &q, rows);
}

troupe_err
troupe_table_get_many_wait(troupe_tables *t, const char *table,
                           const void *const *keys, const size_t *klens,
                           size_t n, troupe_rows **rows)
{
    troupe_err be = troupe__block_check("troupe_table_get_many_wait");
    if (be != TROUPE_OK)
        return be;
    treq q = {.kind = TABLE_GET_MANY, .keys = keys, .klens = klens, .n = n};
    return read_block(t, table, &q, rows);
}

troupe_err
troupe_table_scan_wait(troupe_tables *t, const char *table,
                       const troupe_scan_opts *so, troupe_rows **rows)
{
    troupe_err be = troupe__block_check("troupe_table_scan_wait");
    if (be != TROUPE_OK)
        return be;
    treq q = {.kind = TABLE_SCAN, .so = so};
    return read_block(t, table, &q, rows);
}
