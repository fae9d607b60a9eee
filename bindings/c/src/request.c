/*
 * A request in flight: its completion reserved on the node's host when it
 * is accepted (the bound on what waits for the host), posted exactly once
 * from its callback, and counted on the node until then so that close
 * waits for it.
 */
#include "node.h"
#include "troupe/alloc.h"
#include "troupe/internal/runtime.h"

void
abi_pending_add(troupe_abi *n)
{
    pthread_mutex_lock(&n->mu);
    n->pending++;
    pthread_mutex_unlock(&n->mu);
}

void
abi_pending_sub(troupe_abi *n)
{
    pthread_mutex_lock(&n->mu);
    if (--n->pending == 0)
        pthread_cond_broadcast(&n->cond);
    pthread_mutex_unlock(&n->mu);
}

troupe_err
abi_req_open(troupe_abi *n, uint64_t id, abi_req **out)
{
    *out = NULL;
    abi_req *r = troupe_calloc(1, sizeof(*r));
    if (r == NULL)
        return TROUPE_ENOMEM;
    troupe_err e = troupe__completion_reserve(n->host, id, &r->c);
    if (e != TROUPE_OK) {
        troupe_free(r);
        return e;
    }
    r->n = n;
    abi_pending_add(n);
    *out = r;
    return TROUPE_OK;
}

void
abi_req_cancel(abi_req *r)
{
    troupe_abi *n = r->n;
    troupe__completion_cancel(r->c);
    troupe_free(r);
    abi_pending_sub(n);
}

void
abi_req_done(abi_req *r, troupe_err status, const void *body, size_t len)
{
    troupe_abi *n = r->n;
    troupe__completion_post(r->c, status, body, len);
    troupe_free(r);
    abi_pending_sub(n);
}

troupe_err
abi_req_begin(troupe_abi *n, uint64_t id, const char *call, abi_req **r)
{
    *r = NULL;
    if (n == NULL)
        return troupe__errf(TROUPE_EINVAL, "%s: NULL node", call);
    troupe_err e = abi_enter(n, true, call);
    if (e != TROUPE_OK)
        return e;
    if ((e = abi_req_open(n, id, r)) != TROUPE_OK)
        abi_leave(n);
    return e;
}

int
abi_req_end(troupe_abi *n, abi_req *r, troupe_err e)
{
    if (e != TROUPE_OK)
        abi_req_cancel(r);
    abi_leave(n);
    return abi_ret(e);
}

void
abi_req_got(troupe_err err, troupe_rows *rows, void *arg)
{
    if (err == TROUPE_OK && rows != NULL && rows->n == 1)
        abi_req_done(arg, err, rows->rows[0].doc, rows->rows[0].doc_len);
    else
        abi_req_done(arg, err == TROUPE_OK ? TROUPE_ENOENT : err, NULL, 0);
    troupe_rows_destroy(rows);
}

void
abi_req_done_packed(abi_req *r, troupe_err err, msgpack_sbuffer *sb)
{
    if (err == TROUPE_OK)
        abi_req_done(r, err, sb->data, sb->size);
    else
        abi_req_done(r, err, NULL, 0);
    msgpack_sbuffer_destroy(sb);
}
