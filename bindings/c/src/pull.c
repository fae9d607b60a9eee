/*
 * The pull side of a node: its targets on the node's host, pulls, replies
 * and the wake. Thin on purpose: troupe/dispatch.h's host endpoint has
 * the rules (records, ETOOBIG, edge-triggered wake, EDEADLK); this file
 * adds the node's lifecycle and the thread's message.
 */
#include <string.h>

#include "node.h"
#include "troupe/alloc.h"
#include "troupe/internal/runtime.h"

int
troupe_abi_wake_fd(troupe_abi *n, int *fd)
{
    abi_clear();
    if (fd != NULL)
        *fd = -1;
    if (n == NULL || fd == NULL)
        return abi_ret(troupe__errf(TROUPE_EINVAL, "wake fd: NULL argument"));
    *fd = troupe_host_wake_fd(n->host);
    return abi_ret(TROUPE_OK);
}

int
troupe_abi_set_wake(troupe_abi *n, void (*fn)(void *arg), void *arg)
{
    abi_clear();
    if (n == NULL)
        return abi_ret(troupe__errf(TROUPE_EINVAL, "set wake: NULL node"));
    return abi_ret(troupe_host_set_wake(n->host, fn, arg));
}

int
troupe_abi_register_pull(troupe_abi *n, const char *name, uint32_t credit,
                         uint32_t timeout_ms, uint32_t *index)
{
    abi_clear();
    if (index != NULL)
        *index = 0;
    if (n == NULL || name == NULL || index == NULL)
        return abi_ret(
            troupe__errf(TROUPE_EINVAL, "register pull: NULL argument"));
    troupe_err e = abi_enter(n, false, "register pull");
    if (e != TROUPE_OK)
        return abi_ret(e);
    pthread_mutex_lock(&n->mu);
    if (n->ntargets == n->targets_cap) {
        size_t nc = n->targets_cap ? 2 * n->targets_cap : 8;
        troupe_target **a = troupe_realloc(n->targets, nc * sizeof(*a));
        if (a == NULL) {
            pthread_mutex_unlock(&n->mu);
            abi_leave(n);
            return abi_ret(TROUPE_ENOMEM);
        }
        n->targets = a;
        n->targets_cap = nc;
    }
    pthread_mutex_unlock(&n->mu);
    troupe_target_opts o = {.name = name,
                            .host = n->host,
                            .credit = credit,
                            .timeout_ms = timeout_ms};
    troupe_target *t = NULL;
    if ((e = troupe_target_create(n->rt, &o, &t)) == TROUPE_OK) {
        pthread_mutex_lock(&n->mu);
        n->targets[n->ntargets++] = t;
        pthread_mutex_unlock(&n->mu);
        *index = troupe_target_host_index(t);
    }
    abi_leave(n);
    return abi_ret(e);
}

int
troupe_abi_next_task(troupe_abi *n, int timeout_ms, void *buf, size_t cap,
                     size_t *len)
{
    size_t count;
    return troupe_abi_next_batch(n, timeout_ms, buf, cap, 1, &count, len);
}

int
troupe_abi_next_batch(troupe_abi *n, int timeout_ms, void *buf, size_t cap,
                      size_t max, size_t *count, size_t *len)
{
    abi_clear();
    if (n == NULL) {
        if (count != NULL)
            *count = 0;
        if (len != NULL)
            *len = 0;
        return abi_ret(troupe__errf(TROUPE_EINVAL, "next: NULL node"));
    }
    return abi_ret(
        troupe_host_next_batch(n->host, timeout_ms, buf, cap, max, count, len));
}

int
troupe_abi_reply(troupe_abi *n, uint64_t task_id, uint32_t outcome,
                 const void *body, size_t len)
{
    abi_clear();
    if (n == NULL)
        return abi_ret(troupe__errf(TROUPE_EINVAL, "reply: NULL node"));
    return abi_ret(troupe_host_reply(n->host, task_id, outcome, body, len));
}

int
troupe_abi_reply_batch(troupe_abi *n, const void *buf, size_t len, size_t *done,
                       size_t *refused)
{
    abi_clear();
    if (n == NULL) {
        if (done != NULL)
            *done = 0;
        if (refused != NULL)
            *refused = 0;
        return abi_ret(troupe__errf(TROUPE_EINVAL, "reply batch: NULL node"));
    }
    return abi_ret(troupe_host_reply_batch(n->host, buf, len, done, refused));
}
