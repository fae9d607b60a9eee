/*
 * Queue calls: create, publish (a request), and subscriptions: a queue
 * worker over every partition whose target is one of the node's pull
 * targets, so that the events come as tasks on the node's host
 * (docs/queue.md "Pull workers"). The workers live until close, which
 * stops them with the queues.
 */
#include <string.h>

#include "node.h"
#include "troupe/alloc.h"
#include "troupe/internal/runtime.h"

int
troupe_abi_queue_create(troupe_abi *n, const char *name, uint32_t partitions,
                        int64_t retention_ms, uint32_t max_attempts)
{
    abi_clear();
    if (n == NULL)
        return abi_ret(troupe__errf(TROUPE_EINVAL, "queue create: NULL node"));
    troupe_err e = troupe__block_check("troupe_abi_queue_create");
    if (e != TROUPE_OK)
        return abi_ret(e);
    if ((e = abi_enter(n, true, "queue create")) != TROUPE_OK)
        return abi_ret(e);
    troupe_queue_spec qs = {.name = name,
                            .partitions = partitions,
                            .retention_ms = retention_ms,
                            .max_attempts = max_attempts};
    e = troupe_queues_create_wait(n->queues, &qs);
    abi_leave(n);
    return abi_ret(e);
}

static void
published(troupe_err err, void *arg)
{
    abi_req_done(arg, err, NULL, 0);
}

int
troupe_abi_queue_publish(troupe_abi *n, uint64_t req, const char *queue,
                         const void *id, size_t id_len, const void *key,
                         size_t key_len, const void *payload, size_t plen,
                         int64_t time_ms)
{
    abi_clear();
    abi_req *r;
    troupe_err e = abi_req_begin(n, req, "queue publish", &r);
    if (e != TROUPE_OK)
        return abi_ret(e);
    troupe_queue_event ev = {.id = id,
                             .id_len = id_len,
                             .key = key,
                             .key_len = key_len,
                             .payload = payload,
                             .payload_len = plen,
                             .time_ms = time_ms};
    return abi_req_end(
        n, r,
        troupe_queue_publish(n->queues, queue, &ev, n->sync, published, r));
}

/* The partitions of queue `name` (0 with ENOQUEUE when there is none). */
static troupe_err
partitions_of(troupe_abi *n, const char *name, uint32_t *parts)
{
    troupe_queue_info *qi = NULL;
    size_t nq = 0;
    *parts = 0;
    troupe_err e = troupe_queues_list(n->queues, &qi, &nq);
    if (e != TROUPE_OK)
        return e;
    for (size_t i = 0; i < nq; i++)
        if (strcmp(qi[i].name, name) == 0)
            *parts = qi[i].partitions;
    troupe_free(qi);
    if (*parts == 0)
        return troupe__err_named(TROUPE_ENOQUEUE, "queue subscribe: no queue",
                                 name, strlen(name));
    return TROUPE_OK;
}

int
troupe_abi_queue_subscribe(troupe_abi *n, const char *queue, const char *target)
{
    abi_clear();
    if (n == NULL || queue == NULL || target == NULL)
        return abi_ret(
            troupe__errf(TROUPE_EINVAL, "queue subscribe: NULL argument"));
    troupe_err e = abi_enter(n, true, "queue subscribe");
    if (e != TROUPE_OK)
        return abi_ret(e);
    uint32_t parts;
    if ((e = partitions_of(n, queue, &parts)) != TROUPE_OK) {
        abi_leave(n);
        return abi_ret(e);
    }
    pthread_mutex_lock(&n->mu);
    if (n->nworkers >= TROUPE_ABI_WORKERS_MAX) {
        e = troupe__errf(TROUPE_EFULL, "queue subscribe: %u subscriptions",
                         TROUPE_ABI_WORKERS_MAX);
    } else if (n->nworkers == n->workers_cap) {
        size_t nc = n->workers_cap ? 2 * n->workers_cap : 8;
        troupe_queue_worker **a = troupe_realloc(n->workers, nc * sizeof(*a));
        if (a == NULL)
            e = TROUPE_ENOMEM;
        else {
            n->workers = a;
            n->workers_cap = nc;
        }
    }
    if (e == TROUPE_OK) {
        troupe_queue_worker_opts wo = {.queue = queue,
                                       .first = 0,
                                       .last = parts - 1,
                                       .target = target,
                                       .sync = n->sync};
        troupe_queue_worker *w = NULL;
        if ((e = troupe_queue_worker_create(n->queues, &wo, &w)) == TROUPE_OK)
            n->workers[n->nworkers++] = w;
    }
    pthread_mutex_unlock(&n->mu);
    abi_leave(n);
    return abi_ret(e);
}
