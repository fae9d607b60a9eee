/*
 * The versioned API (pi_db's): queries that answer rows with their key
 * versions, read versions a transaction declares, and the commit with
 * that external read set (each key carries the version the client read,
 * which the table compares with the key's current version instead of
 * with the snapshot's); the finish replies carry the versions published,
 * which become the receipts.
 */
#include <stdlib.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/internal/participant.h"
#include "troupe/internal/runtime.h"
#include "troupe/internal/tables.h"
#include "troupe/internal/waiter.h"
#include "troupe/pack.h"
#include "txn_int.h"

typedef struct qcall {
    troupe_txn_version_cb cb;   /* one key */
    troupe_txn_versions_cb mcb; /* many */
    void *arg;
    size_t n;
    ttables_shared *ts;
} qcall;

/* Decodes [[version, ...n], rows body] into *vers (troupe_malloc'ed) and
 * *rows. */
static troupe_err
qver_decode(const troupe_msg *reply, size_t n, uint64_t **vers,
            troupe_rows **rows)
{
    if (reply == NULL || reply->body == NULL)
        return TROUPE_EPROTO;
    troupe_reader r;
    uint32_t cnt = 0;
    troupe_reader_init(&r, troupe_body_data(reply->body),
                       troupe_body_len(reply->body));
    troupe_read_array_n(&r, 2);
    troupe_read_array(&r, &cnt);
    if (r.err != TROUPE_OK || cnt != n)
        return TROUPE_EPROTO;
    uint64_t *v = troupe_calloc(n, sizeof(*v));
    if (v == NULL)
        return TROUPE_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        troupe_read_uint(&r, &v[i]);
        if (r.err == TROUPE_OK && v[i] == 0)
            r.err = TROUPE_EPROTO;
    }
    const void *raw = NULL;
    size_t rlen = 0;
    troupe_read_raw(&r, &raw, &rlen);
    troupe_body *b = NULL;
    troupe_err e = troupe_read_end(&r) != TROUPE_OK
                       ? TROUPE_EPROTO
                       : troupe_body_copy(raw, rlen, &b);
    if (e == TROUPE_OK)
        e = troupe__rows_from_body(b, rows);
    troupe_body_release(b);
    if (e != TROUPE_OK) {
        troupe_free(v);
        return e;
    }
    *vers = v;
    return TROUPE_OK;
}

static void
on_qver(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    (void)rt;
    qcall *c = arg;
    troupe_rows *rows = NULL;
    uint64_t *vers = NULL;
    if (err == TROUPE_EDEAD)
        err = TROUPE_ECLOSED; /* the table's actor went meanwhile */
    if (err == TROUPE_OK)
        err = qver_decode(reply, c->n, &vers, &rows);
    atomic_fetch_add_explicit(err == TROUPE_OK ? &c->ts->qver_ok
                                               : &c->ts->qver_fail,
                              c->n, memory_order_relaxed);
    qcall cc = *c;
    troupe_free(c);
    if (cc.mcb != NULL) {
        cc.mcb(err, rows, vers, cc.arg);
        return;
    }
    uint64_t ver = err == TROUPE_OK ? vers[0] : 0;
    troupe_free(vers);
    cc.cb(err, rows, ver, cc.arg);
}

static troupe_err
query_versions(troupe_tables *t, const char *table, const void *const *keys,
               const size_t *klens, size_t n, troupe_txn_version_cb cb,
               troupe_txn_versions_cb mcb, void *arg)
{
    if (t == NULL || table == NULL || (cb == NULL && mcb == NULL) ||
        keys == NULL || klens == NULL || n == 0 || n > TROUPE_TABLE_PAGE_MAX)
        return TROUPE_EINVAL;
    troupe_err e = TROUPE_OK;
    for (size_t i = 0; e == TROUPE_OK && i < n; i++)
        e = troupe__table_key_check(keys[i], klens[i]);
    if (e == TROUPE_OK) /* a first version is handed out: see txn.h */
        e = troupe__tables_writable(t, cb != NULL
                                           ? "troupe_txn_query_version"
                                           : "troupe_txn_query_versions");
    ttxn_env env;
    troupe_addr a;
    troupe_cf *cf;
    if (e != TROUPE_OK || (e = troupe__tables_txn_env(t, &env)) != TROUPE_OK ||
        (e = troupe__tables_lookup_cf(t, table, &a, &cf)) != TROUPE_OK)
        return e;
    ttxn_qver *q = troupe__ttxn_qver_new(keys, klens, n);
    qcall *c = troupe_malloc(sizeof(*c));
    troupe_msg *m = NULL;
    if (q == NULL || c == NULL ||
        troupe_msg_create(&m, TROUPE__PART_QVER, NULL, 0) != TROUPE_OK) {
        troupe_free(q);
        troupe_free(c);
        return TROUPE_ENOMEM;
    }
    m->ptr = q;
    m->ptr_drop = troupe_free;
    *c = (qcall){cb, mcb, arg, n, env.ts};
    e = troupe_runtime_ask(env.rt, a, &m, env.timeout_ms, on_qver, c);
    if (e != TROUPE_OK)
        troupe_free(c);
    return e;
}

troupe_err
troupe_txn_query_version(troupe_tables *t, const char *table, const void *key,
                         size_t klen, troupe_txn_version_cb cb, void *arg)
{
    if (cb == NULL)
        return TROUPE_EINVAL;
    return query_versions(t, table, &key, &klen, 1, cb, NULL, arg);
}

troupe_err
troupe_txn_query_versions(troupe_tables *t, const char *table,
                          const void *const *keys, const size_t *klens,
                          size_t n, troupe_txn_versions_cb cb, void *arg)
{
    if (cb == NULL)
        return TROUPE_EINVAL;
    return query_versions(t, table, keys, klens, n, NULL, cb, arg);
}

typedef struct qwait {
    troupe__waiter w;
    uint64_t ver;
    uint64_t *vers;
} qwait;

static void
wake_qver(troupe_err err, troupe_rows *rows, uint64_t ver, void *arg)
{
    qwait *q = arg;
    q->ver = ver;
    troupe__waiter_release(&q->w, err, rows);
}

static void
wake_qvers(troupe_err err, troupe_rows *rows, uint64_t *vers, void *arg)
{
    qwait *q = arg;
    q->vers = vers;
    troupe__waiter_release(&q->w, err, rows);
}

troupe_err
troupe_txn_query_version_wait(troupe_tables *t, const char *table,
                              const void *key, size_t klen, troupe_rows **rows,
                              uint64_t *version)
{
    troupe_err be = troupe__block_check("troupe_txn_query_version_wait");
    if (be != TROUPE_OK)
        return be;
    if (rows == NULL || version == NULL)
        return TROUPE_EINVAL;
    *version = 0;
    qwait q = {0};
    troupe__waiter_init(&q.w, 1);
    troupe_err e = troupe__txn_finish_rows(
        &q.w, troupe_txn_query_version(t, table, key, klen, wake_qver, &q),
        rows);
    if (e == TROUPE_OK)
        *version = q.ver;
    return e;
}

troupe_err
troupe_txn_query_versions_wait(troupe_tables *t, const char *table,
                               const void *const *keys, const size_t *klens,
                               size_t n, troupe_rows **rows,
                               uint64_t **versions)
{
    troupe_err be = troupe__block_check("troupe_txn_query_versions_wait");
    if (be != TROUPE_OK)
        return be;
    if (rows == NULL || versions == NULL)
        return TROUPE_EINVAL;
    *versions = NULL;
    qwait q = {0};
    troupe__waiter_init(&q.w, 1);
    troupe_err e = troupe__txn_finish_rows(
        &q.w,
        troupe_txn_query_versions(t, table, keys, klens, n, wake_qvers, &q),
        rows);
    if (e == TROUPE_OK)
        *versions = q.vers;
    else
        troupe_free(q.vers);
    return e;
}

troupe_err
troupe_txn_read_version(troupe_txn *tx, const char *table, const void *key,
                        size_t klen, uint64_t version)
{
    if (tx == NULL || table == NULL || version == 0)
        return TROUPE_EINVAL;
    troupe_err e = troupe__table_key_check(key, klen);
    if (e != TROUPE_OK)
        return e;
    if (tx->state != TX_OPEN || tx->mode == MODE_ORDINARY)
        return TROUPE_ESTATE;
    if ((e = troupe__tables_writable(tx->t, "troupe_txn_read_version")) !=
        TROUPE_OK)
        return e;
    uint32_t tab;
    xkey *x;
    if ((e = troupe__txn_tab_of(tx, table, &tab)) != TROUPE_OK)
        return e;
    /* A second read entry of one key is refused, not merged: the last
     * one winning would let a stale read followed by a current one
     * commit (pi_db rejects duplicate entries before anything happens). */
    x = troupe__txn_kfind(tx, tab, key, klen);
    if (x != NULL && x->ver != 0)
        return TROUPE_EINVAL;
    if (x == NULL &&
        (e = troupe__txn_kget(tx, tab, key, klen, &x)) != TROUPE_OK)
        return e;
    tx->mode = MODE_VERSIONED;
    x->ver = version;
    return TROUPE_OK;
}

troupe_err
troupe_txn_receipts(const troupe_txn *tx, const troupe_txn_receipt **r,
                    size_t *n)
{
    if (tx == NULL || r == NULL || n == NULL)
        return TROUPE_EINVAL;
    *r = tx->commit.nrcpt ? tx->commit.rcpt : NULL;
    *n = tx->commit.nrcpt;
    return TROUPE_OK;
}

static void
wake_vcommit(troupe_txn *tx, troupe_err err, const troupe_txn_conflict *c,
             size_t n, const troupe_txn_receipt *r, size_t nr, void *arg)
{
    (void)tx;
    (void)c;
    (void)n;
    (void)r;
    (void)nr;
    troupe__waiter_release(arg, err, NULL);
}

troupe_err
troupe_txn_commit_version_wait(troupe_txn *tx, troupe_sync sync)
{
    troupe_err be = troupe__block_check("troupe_txn_commit_version_wait");
    if (be != TROUPE_OK)
        return be;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return troupe__waiter_finish(
        &w, troupe_txn_commit_version(tx, sync, wake_vcommit, &w), NULL);
}

troupe_err
troupe_txn_commit_version(troupe_txn *tx, troupe_sync sync,
                          troupe_txn_commit_version_cb cb, void *arg)
{
    if (tx == NULL || cb == NULL || (unsigned)sync > TROUPE_SYNC_OFF)
        return TROUPE_EINVAL;
    if (tx->state != TX_OPEN || tx->mode == MODE_ORDINARY)
        return TROUPE_ESTATE;
    for (size_t i = 0; i < tx->nkeys; i++)
        if (tx->keys[i]->nwrites > 1)
            return TROUPE_EINVAL; /* a key written twice: pi_db refuses */
    tx->commit.cb = NULL;
    tx->commit.vcb = cb;
    tx->commit.arg = arg;
    return troupe__txn_commit_start(tx, sync);
}
