/*
 * XA over troupe's tables (troupe/xa.h): prepare, commit and rollback by
 * xid, and the list. The registry, the record's format and the re-hold at
 * open are the table module's (troupe/internal/xa.h); this file drives
 * them with the commit's two-phase protocol.
 *
 * Prepare is troupe_txn_commit's round with one change at its end: where
 * a commit would submit the batch, an XA prepare registers the xid, then
 * stores the record (the batch's bytes among it) in a synced write of
 * its own. The parts were prepared under a shared state marked xa, so
 * the tables keep them with no reservation deadline; nothing else
 * decides their end but a resolution, which names the same shared state
 * in its finish. Registering before the write makes a second prepare of
 * the xid EEXIST and a resolution that races the write EBUSY, instead of
 * a resolution that finds no entry and answers "already resolved" while
 * the record is about to land.
 *
 * A resolution writes one synced batch (commit: the stored batch rebuilt
 * from its bytes, plus the record's delete and the marker; rollback: the
 * delete and the marker), and only when that write succeeded finishes
 * the parts. A write that fails cleanly leaves the xid prepared; one
 * whose outcome is unknown (EUNKNOWN: the db is fail-stop now) leaves it
 * held, for the reopen to decide from what the disk says.
 */
#include <stdlib.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/internal/participant.h"
#include "troupe/internal/post.h"
#include "troupe/internal/runtime.h"
#include "troupe/internal/tables.h"
#include "troupe/internal/waiter.h"
#include "troupe/internal/xa.h"
#include "troupe/pack.h"
#include "troupe/storage.h"
#include "troupe/xa.h"
#include "txn_int.h"

_Static_assert(TROUPE_XA_XID_MAX == TROUPE__XA_XID_MAX, "xid bound");
_Static_assert(TROUPE_XA_MARKS_MAX == TROUPE__XA_MARKS_MAX, "marker bound");
_Static_assert(TROUPE_TXN_TABLES_MAX == TROUPE__XA_TABLES_MAX, "tables");
_Static_assert(TROUPE_TXN_KEYS_MAX == TROUPE__XA_KEYS_MAX, "keys");

/* ---- prepare ----------------------------------------------------------- */

static int
xkey_cmp(const void *a, const void *b)
{
    const xkey *x = *(const xkey *const *)a, *y = *(const xkey *const *)b;
    return troupe_key_cmp(x->key, x->klen, y->key, y->klen);
}

/* The record of tx (its tables in commit order, which is name order),
 * packed into a troupe_malloc'd *val. */
static troupe_err
rec_build(troupe_txn *tx, void **val, size_t *vlen)
{
    size_t nt = tx->commit.norder;
    txa_tab *tabs = troupe_calloc(nt ? nt : 1, sizeof(*tabs));
    xkey **v = troupe_malloc((tx->nkeys ? tx->nkeys : 1) * sizeof(*v));
    troupe_err e = tabs == NULL || v == NULL ? TROUPE_ENOMEM : TROUPE_OK;
    for (size_t i = 0; e == TROUPE_OK && i < nt; i++) {
        size_t ti = tx->commit.order[i];
        txa_tab *tb = &tabs[i];
        tb->name = tx->tabs[ti].name;
        tb->id = tx->tabs[ti].id;
        size_t n = 0;
        for (size_t k = 0; k < tx->nkeys; k++)
            if (tx->keys[k]->tab == ti)
                v[n++] = tx->keys[k];
        if (n > 1)
            qsort(v, n, sizeof(*v), xkey_cmp);
        tb->keys = troupe_calloc(n ? n : 1, sizeof(*tb->keys));
        tb->ranges = troupe_calloc(tx->tabs[ti].nrg ? tx->tabs[ti].nrg : 1,
                                   sizeof(*tb->ranges));
        if (tb->keys == NULL || tb->ranges == NULL) {
            e = TROUPE_ENOMEM;
            break;
        }
        for (size_t k = 0; k < n; k++) {
            ttxn_key *pk = &tb->keys[k];
            pk->kind = v[k]->kind != K_NONE ? v[k]->kind : TROUPE__PART_READ;
            pk->expires = v[k]->expires;
            pk->nostamp = v[k]->nostamp;
            pk->key = v[k]->key;
            pk->klen = v[k]->klen;
            if (pk->kind <= TROUPE__PART_UPSERT) {
                pk->doc = v[k]->doc;
                pk->dlen = v[k]->dlen;
            }
        }
        tb->n = n;
        for (size_t r = 0; r < tx->nranges; r++) {
            const xrange *xr = &tx->ranges[r];
            if (xr->tab != ti)
                continue;
            tb->ranges[tb->nranges++] =
                (ttxn_range){xr->start, xr->start ? xr->slen : 0, xr->end,
                             xr->end ? xr->elen : 0};
        }
    }
    if (e == TROUPE_OK) {
        txa_rec rec = {.xid = tx->sh->xid,
                       .xlen = strlen(tx->sh->xid),
                       .prep_ms = tx->env.clock(tx->env.clock_ctx),
                       .tabs = tabs,
                       .ntabs = nt};
        rec.batch = troupe_batch_data(tx->sh->batch, &rec.blen);
        troupe_packer p;
        troupe_pack_init(&p);
        troupe__xa_rec_pack(&rec, &p);
        size_t n = 0;
        const void *d = troupe_pack_data(&p, &n);
        e = p.err;
        *val = e == TROUPE_OK ? troupe_malloc(n) : NULL;
        if (e == TROUPE_OK && *val == NULL)
            e = TROUPE_ENOMEM;
        if (e == TROUPE_OK) {
            memcpy(*val, d, n);
            *vlen = n;
        }
        troupe_pack_fini(&p);
    }
    for (size_t i = 0; tabs != NULL && i < nt; i++) {
        troupe_free(tabs[i].keys);
        troupe_free(tabs[i].ranges);
    }
    troupe_free(tabs);
    troupe_free(v);
    return e;
}

typedef struct xprep {
    troupe_txn *tx;
    txa_entry *en;
} xprep;

/* On the writer thread, once the record's write is done. */
static void
on_record(troupe_err err, void *arg)
{
    xprep *xp = arg;
    troupe_txn *tx = xp->tx;
    txa_entry *en = xp->en;
    troupe_free(xp);
    if (err != TROUPE_OK) {
        troupe__xa_unregister(tx->t, en);
        troupe__xa_entry_free(en);
        troupe__txn_abort(tx, err, false);
        return;
    }
    /* The stored bytes are what commits; the parts' ops no longer use the
     * batch, and tx reads nothing more: neither is kept for as long as
     * the xid stays prepared. */
    troupe_batch_destroy(tx->sh->batch);
    tx->sh->batch = NULL;
    troupe_snapshot_destroy(tx->sh->snap);
    tx->sh->snap = NULL;
    troupe__xa_set_state(tx->t, en, TXA_PREPARED);
    troupe__txn_complete(tx, TROUPE_OK, false);
}

void
troupe__txn_xa_prepared(troupe_txn *tx, bool on_s0)
{
    void *val = NULL;
    size_t vlen = 0;
    txa_entry *en = NULL;
    troupe_batch *b = NULL;
    troupe_key_writer w;
    const uint8_t *k;
    size_t kl;
    troupe_err e = rec_build(tx, &val, &vlen);
    if (e == TROUPE_OK)
        e = troupe__xa_entry_new(tx->t, val, vlen, tx->sh, &en);
    if (e == TROUPE_OK &&
        (e = troupe__xa_register(tx->t, en, true)) != TROUPE_OK) {
        troupe__xa_entry_free(en);
        en = NULL;
    }
    if (e != TROUPE_OK) {
        troupe__txn_abort(tx, e, on_s0);
        return;
    }
    xprep *xp = troupe_malloc(sizeof(*xp));
    e = xp == NULL ? TROUPE_ENOMEM : troupe_commit_batch(tx->env.commit, &b);
    troupe__xa_key(&w, "xa", en->rec.xid, en->rec.xlen);
    if (e == TROUPE_OK)
        e = troupe_key_writer_finish(&w, &k, &kl);
    if (e == TROUPE_OK)
        e = troupe_batch_put(b, troupe__xa_meta(tx->t), k, kl, en->val,
                             en->vlen);
    troupe_key_writer_fini(&w);
    if (e == TROUPE_OK) {
        xp->tx = tx;
        xp->en = en;
        e = troupe_commit_submit(tx->env.commit, &b, TROUPE_SYNC_ON, on_record,
                                 xp);
        if (e == TROUPE_OK)
            return; /* on_record goes on */
    }
    troupe_free(xp);
    troupe_batch_destroy(b);
    troupe__xa_unregister(tx->t, en);
    troupe__xa_entry_free(en);
    troupe__txn_abort(tx, e, on_s0);
}

troupe_err
troupe_txn_prepare(troupe_txn *tx, const char *xid, size_t xid_len,
                   troupe_txn_commit_cb cb, void *arg)
{
    if (tx == NULL || cb == NULL)
        return troupe__errf(TROUPE_EINVAL,
                            "troupe_txn_prepare: NULL transaction or cb");
    troupe_err e = troupe__xa_xid_check("troupe_txn_prepare", xid, xid_len);
    if (e != TROUPE_OK)
        return e;
    if (tx->state != TX_OPEN)
        return troupe__errf(TROUPE_ESTATE,
                            "troupe_txn_prepare: the transaction is not open");
    if (tx->mode == MODE_VERSIONED)
        return troupe__errf(TROUPE_ESTATE,
                            "troupe_txn_prepare: a versioned transaction "
                            "cannot be prepared");
    if (tx->nparts > 0)
        return troupe__errf(TROUPE_EINVAL,
                            "troupe_txn_prepare: a transaction with "
                            "participants cannot be prepared");
    e = troupe__tables_writable(tx->t, "troupe_txn_prepare");
    if (e != TROUPE_OK)
        return e;
    tx->commit.cb = cb;
    tx->commit.vcb = NULL;
    tx->commit.arg = arg;
    tx->commit.xa = true;
    /* before any prepare is sent: the tables read it with the parts */
    tx->sh->xa = true;
    memcpy(tx->sh->xid, xid, xid_len);
    tx->sh->xid[xid_len] = '\0';
    e = troupe__txn_commit_start(tx, TROUPE_SYNC_ON);
    if (e != TROUPE_OK) {
        tx->commit.xa = false;
        tx->sh->xa = false;
    }
    return e;
}

static void
wake_prepare(troupe_txn *tx, troupe_err err, const troupe_txn_conflict *c,
             size_t n, void *arg)
{
    (void)tx;
    (void)c;
    (void)n;
    troupe__waiter_release(arg, err, NULL);
}

troupe_err
troupe_txn_prepare_wait(troupe_txn *tx, const char *xid, size_t xid_len)
{
    troupe_err be = troupe__block_check("troupe_txn_prepare_wait");
    if (be != TROUPE_OK)
        return be;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return troupe__waiter_finish(
        &w, troupe_txn_prepare(tx, xid, xid_len, wake_prepare, &w), NULL);
}

/* ---- commit and rollback ------------------------------------------------ */

typedef struct xres {
    troupe_tables *t;
    ttxn_env env;
    txa_entry *en;
    bool commit;
    troupe_xa_cb cb;
    void *arg;
    troupe_err result;
    _Atomic size_t pending;
} xres;

static void
res_call(void *arg, troupe_runtime *rt)
{
    (void)rt;
    xres *x = arg;
    troupe_xa_cb cb = x->cb;
    void *cba = x->arg;
    troupe_err e = x->result;
    troupe_free(x);
    cb(e, cba);
}

/* The callback with `result`, on scheduler 0. */
static void
res_end(xres *x, troupe_err result)
{
    x->result = result;
    troupe__post_or_run(x->env.rt, res_call, x);
}

static void
res_fin_one(xres *x)
{
    if (atomic_fetch_sub(&x->pending, 1) != 1)
        return;
    troupe__xa_unregister(x->t, x->en);
    troupe__xa_entry_free(x->en);
    x->en = NULL;
    res_end(x, TROUPE_OK);
}

static void
on_res_finished(troupe_runtime *rt, troupe_err err, troupe_msg *reply,
                void *arg)
{
    (void)rt;
    (void)err; /* a table gone: its parts went with it */
    (void)reply;
    res_fin_one(arg);
}

/* On the writer thread once the resolution's batch is written. */
static void
on_res_written(troupe_err err, void *arg)
{
    xres *x = arg;
    txa_entry *en = x->en;
    if (err != TROUPE_OK) {
        /* nothing written (or, EUNKNOWN, maybe: the db is fail-stop and a
         * reopen decides from the disk): the xid stays held */
        troupe__xa_set_state(x->t, en, TXA_PREPARED);
        res_end(x, err);
        return;
    }
    int64_t now = x->env.clock(x->env.clock_ctx);
    troupe__xa_marked(x->t, en->rec.xid, en->rec.xlen,
                      x->commit ? TROUPE__XA_COMMITTED : TROUPE__XA_ROLLED_BACK,
                      now);
    uint64_t ver = x->commit ? troupe__vers_take(x->env.vers) : 0;
    int want = TTXN_OPEN;
    atomic_compare_exchange_strong(&en->sh->state, &want,
                                   x->commit ? TTXN_SUBMITTED : TTXN_ABORTED);
    atomic_store(&x->pending, 1);
    for (size_t i = 0; i < en->rec.ntabs; i++) {
        ttxn_fin *f = troupe_calloc(1, sizeof(*f));
        troupe_msg *m = NULL;
        if (f == NULL ||
            troupe_msg_create(&m, TROUPE__PART_FINISH, NULL, 0) != TROUPE_OK) {
            troupe_free(f);
            continue; /* its part stays until the actor stops */
        }
        f->sh = troupe__ttxn_retain(en->sh);
        f->publish = x->commit;
        f->ver = ver;
        m->ptr = f;
        m->ptr_drop = troupe__ttxn_fin_free;
        atomic_fetch_add(&x->pending, 1);
        if (troupe_runtime_ask(x->env.rt, en->addrs[i], &m, x->env.timeout_ms,
                               on_res_finished, x) != TROUPE_OK)
            atomic_fetch_sub(&x->pending, 1);
    }
    res_fin_one(x);
}

/* The resolution's batch: for a commit the stored batch, then the
 * record's delete and the marker. */
static troupe_err
res_batch(xres *x, troupe_batch **out)
{
    txa_entry *en = x->en;
    troupe_batch *b = NULL;
    troupe_err e = x->commit ? troupe_batch_from_data(x->env.db, en->rec.batch,
                                                      en->rec.blen, &b)
                             : troupe_commit_batch(x->env.commit, &b);
    troupe_key_writer w;
    const uint8_t *k;
    size_t kl;
    troupe__xa_key(&w, "xa", en->rec.xid, en->rec.xlen);
    if (e == TROUPE_OK)
        e = troupe_key_writer_finish(&w, &k, &kl);
    if (e == TROUPE_OK)
        e = troupe_batch_delete(b, troupe__xa_meta(x->t), k, kl);
    troupe_key_writer_fini(&w);
    if (e == TROUPE_OK)
        e = troupe__xa_mark_batch(x->t, b, en->rec.xid, en->rec.xlen,
                                  x->commit ? TROUPE__XA_COMMITTED
                                            : TROUPE__XA_ROLLED_BACK,
                                  x->env.clock(x->env.clock_ctx));
    if (e != TROUPE_OK) {
        troupe_batch_destroy(b);
        return e;
    }
    *out = b;
    return TROUPE_OK;
}

static troupe_err
resolve(troupe_tables *t, const char *xid, size_t xid_len, bool commit,
        troupe_xa_cb cb, void *arg)
{
    const char *call = commit ? "troupe_xa_commit" : "troupe_xa_rollback";
    if (t == NULL || cb == NULL)
        return troupe__errf(TROUPE_EINVAL, "%s: NULL tables or cb", call);
    troupe_err e = troupe__xa_xid_check(call, xid, xid_len);
    if (e != TROUPE_OK)
        return e;
    if ((e = troupe__tables_writable(t, call)) != TROUPE_OK)
        return e;
    xres *x = troupe_calloc(1, sizeof(*x));
    if (x == NULL)
        return TROUPE_ENOMEM;
    if ((e = troupe__tables_txn_env(t, &x->env)) != TROUPE_OK) {
        troupe_free(x);
        return e;
    }
    x->t = t;
    x->commit = commit;
    x->cb = cb;
    x->arg = arg;
    e = troupe__xa_claim(t, xid, xid_len, &x->en);
    if (e == TROUPE_ENOENT) {
        /* resolved already, or never prepared: the decision stands
         * unless the marker says it went the other way */
        int m = troupe__xa_marker(t, xid, xid_len);
        bool other =
            m == (commit ? TROUPE__XA_ROLLED_BACK : TROUPE__XA_COMMITTED);
        x->result =
            other ? troupe__errf(TROUPE_ECONFLICT, "%s: xid \"%.*s\" was %s",
                                 call, (int)xid_len, xid,
                                 commit ? "rolled back" : "committed")
                  : TROUPE_OK;
        e = troupe_runtime_post(x->env.rt, res_call, x);
        if (e != TROUPE_OK)
            troupe_free(x);
        return e;
    }
    if (e == TROUPE_EBUSY)
        e = troupe__errf(TROUPE_EBUSY,
                         "%s: xid \"%.*s\" is being prepared or resolved", call,
                         (int)xid_len, xid);
    troupe_batch *b = NULL;
    if (e == TROUPE_OK && (e = res_batch(x, &b)) == TROUPE_OK) {
        e = troupe_commit_submit(x->env.commit, &b, TROUPE_SYNC_ON,
                                 on_res_written, x);
        if (e != TROUPE_OK)
            troupe_batch_destroy(b);
        else
            return TROUPE_OK; /* on_res_written goes on */
    }
    if (x->en != NULL)
        troupe__xa_set_state(t, x->en, TXA_PREPARED);
    troupe_free(x);
    return e;
}

troupe_err
troupe_xa_commit(troupe_tables *t, const char *xid, size_t xid_len,
                 troupe_xa_cb cb, void *arg)
{
    return resolve(t, xid, xid_len, true, cb, arg);
}

troupe_err
troupe_xa_rollback(troupe_tables *t, const char *xid, size_t xid_len,
                   troupe_xa_cb cb, void *arg)
{
    return resolve(t, xid, xid_len, false, cb, arg);
}

static void
wake_res(troupe_err err, void *arg)
{
    troupe__waiter_release(arg, err, NULL);
}

static troupe_err
resolve_wait(troupe_tables *t, const char *xid, size_t xid_len, bool commit)
{
    troupe_err be = troupe__block_check(commit ? "troupe_xa_commit_wait"
                                               : "troupe_xa_rollback_wait");
    if (be != TROUPE_OK)
        return be;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return troupe__waiter_finish(
        &w, resolve(t, xid, xid_len, commit, wake_res, &w), NULL);
}

troupe_err
troupe_xa_commit_wait(troupe_tables *t, const char *xid, size_t xid_len)
{
    return resolve_wait(t, xid, xid_len, true);
}

troupe_err
troupe_xa_rollback_wait(troupe_tables *t, const char *xid, size_t xid_len)
{
    return resolve_wait(t, xid, xid_len, false);
}

/* ---- the list ----------------------------------------------------------- */

troupe_err
troupe_xa_list_wait(troupe_tables *t, const char *after, size_t after_len,
                    size_t limit, troupe_xa_page **out)
{
    if (out != NULL)
        *out = NULL;
    if (t == NULL || out == NULL)
        return troupe__errf(TROUPE_EINVAL,
                            "troupe_xa_list_wait: NULL tables or out");
    if (limit == 0 || limit > TROUPE_XA_PAGE_MAX)
        return troupe__errf(TROUPE_EINVAL,
                            "troupe_xa_list_wait: limit %zu is not 1..%d",
                            limit, TROUPE_XA_PAGE_MAX);
    troupe_err e = TROUPE_OK;
    if (after != NULL && (e = troupe__xa_xid_check("troupe_xa_list_wait", after,
                                                   after_len)) != TROUPE_OK)
        return e;
    ttxn_env env;
    if ((e = troupe__tables_txn_env(t, &env)) != TROUPE_OK)
        return e;
    char **xids = NULL;
    int64_t *ms = NULL;
    size_t n = 0;
    if ((e = troupe__xa_snapshot(t, &xids, &ms, &n)) != TROUPE_OK)
        return e;
    int64_t now = env.clock(env.clock_ctx);
    troupe_xa_page *p = troupe_calloc(1, sizeof(*p));
    size_t first = 0;
    while (after != NULL && first < n &&
           troupe_key_cmp(xids[first], strlen(xids[first]), after, after_len) <=
               0)
        first++;
    size_t k = n - first < limit ? n - first : limit;
    if (p != NULL)
        p->v = troupe_calloc(k ? k : 1, sizeof(*p->v));
    e = p == NULL || p->v == NULL ? TROUPE_ENOMEM : TROUPE_OK;
    for (size_t i = 0; i < n; i++) {
        if (e == TROUPE_OK && i >= first && i < first + k) {
            /* the page owns the strings from here */
            p->v[p->n++] = (troupe_xa_info){.xid = xids[i],
                                            .xid_len = strlen(xids[i]),
                                            .prepared_ms = ms[i],
                                            .age_ms = now - ms[i]};
            continue;
        }
        troupe_free(xids[i]);
    }
    troupe_free(xids);
    troupe_free(ms);
    if (e != TROUPE_OK) {
        troupe_xa_page_destroy(p);
        return e;
    }
    p->more = first + k < n;
    *out = p;
    return TROUPE_OK;
}

void
troupe_xa_page_destroy(troupe_xa_page *p)
{
    if (p == NULL)
        return;
    for (size_t i = 0; i < p->n; i++)
        troupe_free((void *)p->v[i].xid);
    troupe_free(p->v);
    troupe_free(p);
}
