/*
 * Host actors (troupe/hostactor.h): create, stop, destroy, counters.
 *
 * The object is refcounted (the owner, the proxy until it is gone for
 * good, each task in flight, each kick message, a stop), so that a task
 * settling late, a kick or the proxy's end never touch freed memory,
 * whatever order they come in. The stop is a count, `running`: 1 for the
 * stopper, 1 for the proxy, 1 per task in flight. A task holds only while
 * the proxy's share is there (the proxy submits), so the count reaches 0
 * once, on the thread of the last release: the stop's own, the proxy's
 * end (its spawn's arg_free, also when the runtime's shutdown stopped
 * it), or a task's settling. That release takes the credit wait off the
 * target (waiting for a kick in flight, so that none touches the object
 * after) and fires the callback.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostactor_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/post.h"
#include "troupe/internal/runtime.h"
#include "troupe/internal/waiter.h"

void
troupe__ha_release(troupe_host_actor *ha)
{
    if (ha == NULL || atomic_fetch_sub(&ha->refs, 1) != 1)
        return;
    troupe__target_release(ha->target);
    troupe_free(ha->target_name);
    troupe_free(ha);
}

static void
stopped_s0(void *arg, troupe_runtime *rt)
{
    (void)rt;
    troupe_host_actor *ha = arg;
    ha->stop_cb(ha, ha->stop_arg);
    troupe__ha_release(ha); /* the stop's */
}

void
troupe__ha_done(troupe_host_actor *ha)
{
    if (atomic_fetch_sub(&ha->running, 1) != 1)
        return;
    /* the proxy is gone and every task settled: no take queues the wait
     * again, and after this no kick runs */
    troupe__target_credit_unwait(ha->target, &ha->wait);
    atomic_store(&ha->state, HA_STOPPED);
    if (ha->stop_post) {
        troupe__post_or_run(ha->rt, stopped_s0, ha);
    } else {
        ha->stop_cb(ha, ha->stop_arg);
        troupe__ha_release(ha);
    }
}

static bool
name_len(const char *s, size_t *len)
{
    if (s == NULL)
        return false;
    *len = strnlen(s, 256);
    return *len >= 1 && *len <= 255;
}

troupe_err
troupe_host_actor_create(troupe_runtime *rt, const troupe_host_actor_opts *o,
                         troupe_host_actor **out)
{
    if (out != NULL)
        *out = NULL;
    if (rt == NULL || o == NULL || out == NULL)
        return troupe__errf(TROUPE_EINVAL, "host actor: NULL argument");
    size_t nl = 0, tl = 0;
    if (!name_len(o->name, &nl))
        return troupe__errf(TROUPE_EINVAL, "host actor name: 1..255 bytes");
    if (!name_len(o->target, &tl))
        return troupe__errf(TROUPE_EINVAL,
                            "host actor %s: target name of 1..255 bytes",
                            o->name);
    troupe_target *t = troupe__target_find(rt, o->target, tl);
    if (t == NULL)
        return troupe__err_named(TROUPE_ENOENT, "host actor: no target",
                                 o->target, tl);
    troupe_host_actor *ha = troupe_calloc(1, sizeof(*ha));
    char *tn = troupe_malloc(tl + 1);
    if (ha == NULL || tn == NULL) {
        troupe_free(ha);
        troupe_free(tn);
        troupe__target_release(t);
        return TROUPE_ENOMEM;
    }
    memcpy(tn, o->target, tl + 1);
    ha->rt = rt;
    ha->target = t;
    ha->target_name = tn;
    ha->target_len = tl;
    ha->tag = o->tag;
    ha->queue_max =
        o->queue_bytes ? o->queue_bytes : TROUPE_HOST_ACTOR_QUEUE_BYTES_DEFAULT;
    atomic_init(&ha->refs, 2);    /* the owner's and the proxy's */
    atomic_init(&ha->running, 2); /* the stopper's and the proxy's */
    atomic_init(&ha->state, HA_RUNNING);
    troupe__ha_wait_init(ha);
    troupe_spawn_opts so = TROUPE_SPAWN_OPTS_INIT;
    so.arg = ha;
    so.arg_free = troupe__ha_proxy_gone;
    so.name = o->name;
    so.scheduler = o->scheduler;
    troupe_err e =
        troupe_actor_spawn(rt, &troupe__ha_proxy_def, &so, &ha->addr);
    if (e != TROUPE_OK) {
        troupe__target_release(t);
        troupe_free(tn);
        troupe_free(ha);
        if (e == TROUPE_EEXIST)
            return troupe__err_named(e, "host actor: name taken", o->name, nl);
        return e;
    }
    *out = ha;
    return TROUPE_OK;
}

troupe_addr
troupe_host_actor_addr(const troupe_host_actor *a)
{
    return a != NULL ? a->addr : TROUPE_ADDR_NONE;
}

static uint64_t
rd(const _Atomic uint64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

void
troupe_host_actor_stats_get(const troupe_host_actor *a,
                            troupe_host_actor_stats *out)
{
    if (out == NULL)
        return;
    memset(out, 0, sizeof(*out));
    if (a == NULL)
        return;
    out->received = rd(&a->st_received);
    out->submitted = rd(&a->st_submitted);
    out->replied = rd(&a->st_replied);
    out->failed = rd(&a->st_failed);
    out->unknown = rd(&a->st_unknown);
    out->sends_done = rd(&a->st_sends_done);
    out->busy = rd(&a->st_busy);
    out->dropped = rd(&a->st_dropped);
    out->closed = rd(&a->st_closed);
    out->expired = rd(&a->st_expired);
    out->reply_lost = rd(&a->st_reply_lost);
    out->queued = rd(&a->st_queued);
    out->queued_bytes = rd(&a->st_queued_bytes);
    out->in_flight = rd(&a->st_in_flight);
}

static troupe_err
stop_start(troupe_host_actor *ha, troupe_host_actor_stop_cb cb, void *arg,
           bool post)
{
    int want = HA_RUNNING;
    if (!atomic_compare_exchange_strong(&ha->state, &want, HA_STOPPING))
        return troupe__errf(TROUPE_ESTATE, "host actor: stopping already");
    ha->stop_cb = cb;
    ha->stop_arg = arg;
    ha->stop_post = post;
    atomic_fetch_add(&ha->refs, 1); /* released once cb has run */
    atomic_store(&ha->stopping, true);
    /* EDEAD or ESTATE: the runtime's shutdown stopped it already */
    (void)troupe_actor_stop(ha->rt, ha->addr, NULL, NULL);
    troupe__ha_done(ha); /* the stopper's share */
    return TROUPE_OK;
}

troupe_err
troupe_host_actor_stop(troupe_host_actor *a, troupe_host_actor_stop_cb cb,
                       void *arg)
{
    if (a == NULL || cb == NULL)
        return troupe__errf(TROUPE_EINVAL, "host actor stop: NULL argument");
    return stop_start(a, cb, arg, true);
}

static void
wake_stopped(troupe_host_actor *a, void *arg)
{
    (void)a;
    troupe__waiter_release(arg, TROUPE_OK, NULL);
}

troupe_err
troupe_host_actor_stop_wait(troupe_host_actor *a)
{
    if (a == NULL)
        return troupe__errf(TROUPE_EINVAL, "host actor stop: NULL argument");
    troupe_err e = troupe__block_check("troupe_host_actor_stop_wait");
    if (e != TROUPE_OK)
        return e;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return troupe__waiter_finish(&w, stop_start(a, wake_stopped, &w, false),
                                 NULL);
}

void
troupe_host_actor_destroy(troupe_host_actor *a)
{
    if (a == NULL)
        return;
    if (atomic_load(&a->state) != HA_STOPPED) {
        fprintf(stderr, "troupe: host_actor_destroy of one not stopped\n");
        abort();
    }
    troupe__ha_release(a); /* the owner's */
}
