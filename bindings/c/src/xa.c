/*
 * XA branches from a host (troupe/abi.h, "XA"): an xa global transaction
 * begun by the coordinator, and a branch that is one of the node's open
 * transactions (txn.c's table) prepared under gid/branch-id through
 * troupe_xa_branch (troupe/coordinator.h). The prepare ends the
 * transaction as a commit does: its callback posts the completion, then
 * the transaction is destroyed on scheduler 0 (abi_txn_end).
 */
#include <string.h>

#include "node.h"
#include "troupe/alloc.h"
#include "troupe/internal/runtime.h"

/* A completion's body on error: the error's text, a msgpack str (the
 * coordinator's own detail stays on its thread). */
static void
done_err(abi_req *r, troupe_err err)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    const char *m = troupe_strerror(err);
    msgpack_pack_str_with_body(&pk, m, strlen(m));
    abi_req_done(r, err, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

static void
begun(troupe_err err, void *arg)
{
    if (err == TROUPE_OK)
        abi_req_done(arg, err, NULL, 0);
    else
        done_err(arg, err);
}

int
troupe_abi_xa_begin(troupe_abi *n, uint64_t req, const char *gid,
                    size_t gid_len)
{
    abi_clear();
    abi_req *r;
    troupe_err e = abi_req_begin(n, req, "xa begin", &r);
    if (e != TROUPE_OK)
        return abi_ret(e);
    if (gid == NULL)
        e = troupe__errf(TROUPE_EINVAL, "xa begin: NULL gid");
    else
        e = troupe_xa_begin(n->coord, gid, gid_len, begun, r);
    return abi_req_end(n, r, e);
}

/* The branch's end: its id, or the conflicts its prepare lost on, or
 * the error; then the transaction goes. */
static void
branched(troupe_err err, const char *branch_id, void *arg)
{
    abi_req *r = arg;
    troupe_abi *n = r->n;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    troupe_err pe = TROUPE_OK;
    if (err == TROUPE_OK) {
        msgpack_pack_str_with_body(&pk, branch_id, strlen(branch_id));
    } else if (err == TROUPE_ECONFLICT) {
        const troupe_txn_conflict *c = NULL;
        size_t nc = 0;
        pthread_mutex_lock(&n->mu);
        abi_txn *x = abi_txn_find(n, r->txn);
        if (x != NULL)
            (void)troupe_txn_conflicts(x->tx, &c, &nc);
        pe = abi_pack_conflicts(c, nc, &sb);
        pthread_mutex_unlock(&n->mu);
    } else {
        const char *m = troupe_strerror(err);
        msgpack_pack_str_with_body(&pk, m, strlen(m));
    }
    if (pe != TROUPE_OK)
        troupe__completion_post(r->c, pe, NULL, 0);
    else
        troupe__completion_post(r->c, err, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    r->c = NULL;
    abi_txn_end(r);
}

int
troupe_abi_xa_branch(troupe_abi *n, uint64_t req, const char *gid,
                     size_t gid_len, uint64_t txn)
{
    abi_clear();
    abi_req *r;
    troupe_err e = abi_req_begin(n, req, "xa branch", &r);
    if (e != TROUPE_OK)
        return abi_ret(e);
    r->txn = txn;
    abi_txn *x;
    if (gid == NULL) {
        e = troupe__errf(TROUPE_EINVAL, "xa branch: NULL gid");
    } else if ((e = abi_txn_lookup(n, txn, "xa branch", &x)) == TROUPE_OK) {
        e = troupe_xa_branch(n->coord, gid, gid_len, x->tx, branched, r);
        if (e == TROUPE_OK)
            x->committing = true;
        pthread_mutex_unlock(&n->mu);
    }
    return abi_req_end(n, r, e);
}
