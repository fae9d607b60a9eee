/*
 * Actors a host implements (troupe/hostactor.h) and asks to actors by
 * name: an actor name served by one of the node's pull targets, whose
 * messages come as tasks of kind TROUPE_TASK_ACTOR (the host's reply
 * answers an ask), and a request that asks any named actor and completes
 * with its reply. The proxies live until close, which stops them before
 * the targets.
 */
#include <string.h>

#include "node.h"
#include "troupe/alloc.h"
#include "troupe/internal/runtime.h"

int
troupe_abi_actor_serve(troupe_abi *n, const char *name, const char *target,
                       uint32_t tag)
{
    abi_clear();
    if (n == NULL || name == NULL || target == NULL)
        return abi_ret(
            troupe__errf(TROUPE_EINVAL, "actor serve: NULL argument"));
    troupe_err e = abi_enter(n, false, "actor serve");
    if (e != TROUPE_OK)
        return abi_ret(e);
    pthread_mutex_lock(&n->mu);
    if (n->nactors >= TROUPE_ABI_ACTORS_MAX) {
        e = troupe__errf(TROUPE_EFULL, "actor serve: %u actors served",
                         TROUPE_ABI_ACTORS_MAX);
    } else if (n->nactors == n->actors_cap) {
        size_t nc = n->actors_cap ? 2 * n->actors_cap : 8;
        troupe_host_actor **a = troupe_realloc(n->actors, nc * sizeof(*a));
        if (a == NULL)
            e = TROUPE_ENOMEM;
        else {
            n->actors = a;
            n->actors_cap = nc;
        }
    }
    if (e == TROUPE_OK) {
        troupe_host_actor_opts o = {
            .name = name, .target = target, .tag = tag, .scheduler = -1};
        troupe_host_actor *a = NULL;
        if ((e = troupe_host_actor_create(n->rt, &o, &a)) == TROUPE_OK)
            n->actors[n->nactors++] = a;
    }
    pthread_mutex_unlock(&n->mu);
    abi_leave(n);
    return abi_ret(e);
}

static void
answered(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    abi_req_done(arg, err, reply ? troupe_msg_data(reply) : NULL,
                 reply ? troupe_msg_len(reply) : 0);
}

int
troupe_abi_actor_ask(troupe_abi *n, uint64_t req, const char *name,
                     uint32_t kind, const void *body, size_t len,
                     uint32_t timeout_ms)
{
    abi_clear();
    if (n == NULL || name == NULL || (body == NULL && len > 0))
        return abi_ret(troupe__errf(TROUPE_EINVAL, "actor ask: NULL argument"));
    troupe_err e = abi_enter(n, false, "actor ask");
    if (e != TROUPE_OK)
        return abi_ret(e);
    troupe_addr to;
    if (troupe_registry_lookup(n->rt, name, &to) != TROUPE_OK) {
        abi_leave(n);
        return abi_ret(troupe__err_named(TROUPE_ENOENT, "actor ask: no actor",
                                         name, strlen(name)));
    }
    troupe_msg *m = NULL;
    if ((e = troupe_msg_create(&m, kind, body, len)) != TROUPE_OK) {
        abi_leave(n);
        return abi_ret(e);
    }
    abi_req *r;
    if ((e = abi_req_open(n, req, &r)) != TROUPE_OK) {
        troupe_msg_destroy(m);
        abi_leave(n);
        return abi_ret(e);
    }
    e = troupe_runtime_ask(n->rt, to, &m, timeout_ms ? timeout_ms : 30000,
                           answered, r);
    return abi_req_end(n, r, e);
}
