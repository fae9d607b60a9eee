/*
 * Transactions by integer id. The node keeps a table of the open ones
 * (id -> troupe_txn), so that a bad or stale id is ENOENT, never a freed
 * pointer. Every call on a transaction runs under the node's lock: a
 * troupe_txn is used by one thread at a time, and none of these calls
 * blocks.
 *
 * A commit ends the transaction: its callback posts the completion and
 * then a job on scheduler 0 destroys it (a transaction cannot be
 * destroyed inside its own commit callback) and only then counts the
 * request done, so that close never meets a transaction still
 * committing.
 */
#include <string.h>

#include "node.h"
#include "troupe/alloc.h"
#include "troupe/internal/runtime.h"

abi_txn *
abi_txn_find(troupe_abi *n, uint64_t id)
{
    for (size_t i = 0; i < n->ntxns; i++)
        if (n->txns[i].id == id)
            return &n->txns[i];
    return NULL;
}

/* Removes the entry (n->mu held); returns its transaction. */
static troupe_txn *
take(troupe_abi *n, abi_txn *x)
{
    troupe_txn *tx = x->tx;
    *x = n->txns[--n->ntxns];
    return tx;
}

int
troupe_abi_txn_begin(troupe_abi *n, uint64_t *txn)
{
    abi_clear();
    if (txn != NULL)
        *txn = 0;
    if (n == NULL || txn == NULL)
        return abi_ret(troupe__errf(TROUPE_EINVAL, "txn begin: NULL argument"));
    troupe_err e = abi_enter(n, true, "txn begin");
    if (e != TROUPE_OK)
        return abi_ret(e);
    pthread_mutex_lock(&n->mu);
    if (n->ntxns >= TROUPE_ABI_TXNS_MAX) {
        e = troupe__errf(TROUPE_EFULL, "txn begin: %u transactions open",
                         TROUPE_ABI_TXNS_MAX);
    } else if (n->ntxns == n->txns_cap) {
        size_t nc = n->txns_cap ? 2 * n->txns_cap : 16;
        abi_txn *a = troupe_realloc(n->txns, nc * sizeof(*a));
        if (a == NULL)
            e = TROUPE_ENOMEM;
        else {
            n->txns = a;
            n->txns_cap = nc;
        }
    }
    troupe_txn *tx = NULL;
    if (e == TROUPE_OK &&
        (e = troupe_txn_begin(n->tables, NULL, &tx)) == TROUPE_OK) {
        abi_txn *x = &n->txns[n->ntxns++];
        x->id = ++n->txn_seq;
        x->tx = tx;
        x->committing = false;
        x->checking = false;
        *txn = x->id;
    }
    pthread_mutex_unlock(&n->mu);
    abi_leave(n);
    return abi_ret(e);
}

troupe_err
abi_txn_lookup(troupe_abi *n, uint64_t txn, const char *call, abi_txn **x)
{
    pthread_mutex_lock(&n->mu);
    *x = abi_txn_find(n, txn);
    troupe_err e = TROUPE_OK;
    if (*x == NULL)
        e = troupe__errf(TROUPE_ENOENT, "%s: no open transaction %llu", call,
                         (unsigned long long)txn);
    else if ((*x)->committing)
        e = troupe__errf(TROUPE_ESTATE, "%s: transaction %llu is committing",
                         call, (unsigned long long)txn);
    else if ((*x)->checking)
        e = troupe__errf(TROUPE_ESTATE,
                         "%s: transaction %llu waits for its barrier check",
                         call, (unsigned long long)txn);
    if (e != TROUPE_OK)
        pthread_mutex_unlock(&n->mu);
    return e;
}

int
troupe_abi_txn_get(troupe_abi *n, uint64_t req, uint64_t txn, const char *table,
                   const void *key, size_t klen)
{
    abi_clear();
    abi_req *r;
    troupe_err e = abi_req_begin(n, req, "txn get", &r);
    if (e != TROUPE_OK)
        return abi_ret(e);
    abi_txn *x;
    if ((e = abi_txn_lookup(n, txn, "txn get", &x)) == TROUPE_OK) {
        e = troupe_txn_get(x->tx, table, key, klen, abi_req_got, r);
        pthread_mutex_unlock(&n->mu);
    }
    return abi_req_end(n, r, e);
}

/* A buffering call (put, delete): under the lock, no completion. */
static int
buffer(troupe_abi *n, uint64_t txn, const char *table, const void *key,
       size_t klen, const void *doc, size_t dlen, bool del)
{
    const char *call = del ? "txn delete" : "txn put";
    if (n == NULL)
        return abi_ret(troupe__errf(TROUPE_EINVAL, "%s: NULL node", call));
    troupe_err e = abi_enter(n, true, call);
    if (e != TROUPE_OK)
        return abi_ret(e);
    abi_txn *x;
    if ((e = abi_txn_lookup(n, txn, call, &x)) == TROUPE_OK) {
        e = del ? troupe_txn_delete(x->tx, table, key, klen)
                : troupe_txn_upsert(x->tx, table, key, klen, doc, dlen, NULL);
        pthread_mutex_unlock(&n->mu);
    }
    abi_leave(n);
    return abi_ret(e);
}

int
troupe_abi_txn_put(troupe_abi *n, uint64_t txn, const char *table,
                   const void *key, size_t klen, const void *doc, size_t dlen)
{
    abi_clear();
    return buffer(n, txn, table, key, klen, doc, dlen, false);
}

int
troupe_abi_txn_delete(troupe_abi *n, uint64_t txn, const char *table,
                      const void *key, size_t klen)
{
    abi_clear();
    return buffer(n, txn, table, key, klen, NULL, 0, true);
}

/* After the commit's callback, on scheduler 0: the transaction goes. */
static void
ended(void *arg, troupe_runtime *rt)
{
    abi_req *r = arg;
    troupe_abi *n = r->n;
    pthread_mutex_lock(&n->mu);
    abi_txn *x = abi_txn_find(n, r->txn);
    troupe_txn *tx = x != NULL ? take(n, x) : NULL;
    pthread_mutex_unlock(&n->mu);
    troupe_txn_destroy(tx);
    troupe_free(r);
    abi_pending_sub(n);
}

static void
committed(troupe_txn *tx, troupe_err err, const troupe_txn_conflict *c,
          size_t nc, void *arg)
{
    (void)tx;
    abi_req *r = arg;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    troupe_err pe = TROUPE_OK;
    if (err == TROUPE_ECONFLICT)
        pe = abi_pack_conflicts(c, nc, &sb);
    if (pe != TROUPE_OK)
        troupe__completion_post(r->c, pe, NULL, 0);
    else
        troupe__completion_post(r->c, err, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    r->c = NULL;
    abi_txn_end(r);
}

void
abi_txn_end(abi_req *r)
{
    troupe_abi *n = r->n;
    /* The destroy waits for this callback's return. Scheduler 0 runs
     * until close saw the request done, so the post cannot find it
     * closed; if it could not allocate, close destroys the transaction
     * (the entry stays, marked committing no more). */
    if (troupe_runtime_post(n->rt, ended, r) != TROUPE_OK) {
        pthread_mutex_lock(&n->mu);
        abi_txn *x = abi_txn_find(n, r->txn);
        if (x != NULL)
            x->committing = false;
        pthread_mutex_unlock(&n->mu);
        troupe_free(r);
        abi_pending_sub(n);
    }
}

int
troupe_abi_txn_commit(troupe_abi *n, uint64_t req, uint64_t txn)
{
    abi_clear();
    abi_req *r;
    troupe_err e = abi_req_begin(n, req, "txn commit", &r);
    if (e != TROUPE_OK)
        return abi_ret(e);
    r->txn = txn;
    abi_txn *x;
    if ((e = abi_txn_lookup(n, txn, "txn commit", &x)) == TROUPE_OK) {
        e = troupe_txn_commit(x->tx, n->sync, committed, r);
        if (e == TROUPE_OK)
            x->committing = true;
        pthread_mutex_unlock(&n->mu);
    }
    return abi_req_end(n, r, e);
}

int
troupe_abi_txn_rollback(troupe_abi *n, uint64_t txn)
{
    abi_clear();
    if (n == NULL)
        return abi_ret(troupe__errf(TROUPE_EINVAL, "txn rollback: NULL node"));
    troupe_err e = abi_enter(n, true, "txn rollback");
    if (e != TROUPE_OK)
        return abi_ret(e);
    abi_txn *x;
    troupe_txn *tx = NULL;
    if ((e = abi_txn_lookup(n, txn, "txn rollback", &x)) == TROUPE_OK) {
        tx = take(n, x);
        pthread_mutex_unlock(&n->mu);
    }
    troupe_txn_destroy(tx); /* rolls back what is buffered */
    abi_leave(n);
    return abi_ret(e);
}

void
abi_txns_free(troupe_abi *n)
{
    for (size_t i = 0; i < n->ntxns; i++)
        troupe_txn_destroy(n->txns[i].tx);
    n->ntxns = 0;
}
