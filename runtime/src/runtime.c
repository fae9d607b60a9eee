/*
 * Runtime lifecycle, host-facing sends and asks, the registry.
 *
 * Shutdown runs in steps, each on a scheduler's own thread:
 *  1. shutdown(): phase CLOSING; every scheduler is told to stop its actors
 *     (reverse spawn order; an actor with live children waits for them).
 *  2. Each scheduler whose last actor has gone reports "drained". When all
 *     have, scheduler 0 runs finish(): pending host asks complete with
 *     ECLOSED, the worker pool is told to finish and exit, and every other
 *     scheduler closes its handles and its loop ends.
 *  3. When the pool has exited and every other scheduler has closed,
 *     scheduler 0 closes its own handles; the last close callback runs the
 *     user's shutdown callback.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "disp.h"
#include "rt.h"
#include "troupe/internal/runtime.h"

void
troupe__on_workers_exited(struct sched *s);

static const troupe_actor_def proxy_def = {.name = "troupe.host-proxy"};

static void *
sched_main(void *arg)
{
    struct sched *s = arg;
    char name[16];
    snprintf(name, sizeof(name), "troupe-s%u", s->idx);
    pthread_setname_np(pthread_self(), name); /* for perf, top, gdb */
    troupe__sched_thread_mark();
    troupe__msg_cache_start();
    uv_run(s->loop, UV_RUN_DEFAULT);
    troupe__msg_cache_stop();
    return NULL;
}

troupe_err
troupe_runtime_create(troupe_runtime **out, const troupe_runtime_opts *opts)
{
    if (out == NULL)
        return TROUPE_EINVAL;
    *out = NULL;
    troupe_runtime_opts o = opts ? *opts : (troupe_runtime_opts){0};
    if (o.schedulers > TROUPE_MAX_SCHEDULERS ||
        o.workers > TROUPE_MAX_WORKERS || o.host_workers > TROUPE_MAX_WORKERS ||
        o.logger.level < TROUPE_LOG_DEFAULT ||
        o.logger.level > TROUPE_LOG_DEBUG)
        return TROUPE_EINVAL;
    if (o.schedulers == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o.schedulers = n < 1 ? 1 : n > 64 ? 64 : (unsigned)n;
    }
    if (o.workers == 0)
        o.workers = 4;
    if (o.host_workers == 0)
        o.host_workers = o.workers;
    if (o.node_id == 0)
        o.node_id = 1;
    if (o.mailbox_bytes == 0)
        o.mailbox_bytes = TROUPE_DEFAULT_MAILBOX_BYTES;
    if (o.net_bytes == 0)
        o.net_bytes = TROUPE_DEFAULT_NET_BYTES;
    if (o.work_max_jobs == 0)
        o.work_max_jobs = TROUPE_DEFAULT_WORK_JOBS;
    if (o.work_max_bytes == 0)
        o.work_max_bytes = TROUPE_DEFAULT_WORK_BYTES;
    troupe_runtime *rt = troupe_calloc(1, sizeof(*rt));
    if (rt == NULL)
        return TROUPE_ENOMEM;
    troupe_err ke = troupe__ids_init(rt);
    if (ke != TROUPE_OK) {
        troupe_free(rt);
        return ke;
    }
    rt->node_id = o.node_id;
    rt->logger = o.logger;
    rt->mailbox_bytes = o.mailbox_bytes;
    rt->net_cap = o.net_bytes;
    rt->n_sched = o.schedulers;
    atomic_init(&rt->phase, RT_RUNNING);
    pthread_mutex_init(&rt->slot_lock, NULL);
    pthread_mutex_init(&rt->reg_lock, NULL);
    pthread_mutex_init(&rt->disp_lock, NULL);
    pthread_mutex_init(&rt->done_lock, NULL);
    pthread_cond_init(&rt->done_cond, NULL);
    for (unsigned i = 0; i < SLOT_STRIPES; i++)
        pthread_mutex_init(&rt->stripes[i], NULL);
    rt->scheds = troupe_calloc(rt->n_sched, sizeof(struct sched));
    if (rt->scheds == NULL) {
        troupe_free(rt);
        return TROUPE_ENOMEM;
    }
    troupe_err e = TROUPE_OK;
    unsigned inited = 0;
    for (unsigned i = 0; i < rt->n_sched && e == TROUPE_OK; i++) {
        rt->scheds[i].idx = i;
        e = troupe__sched_init(rt, &rt->scheds[i], i == 0 ? o.loop : NULL);
        if (e == TROUPE_OK)
            inited++;
    }
    if (e == TROUPE_OK)
        e = troupe__workers_start(rt, &o);
    troupe_addr proxy;
    if (e == TROUPE_OK) {
        troupe_spawn_opts so = TROUPE_SPAWN_OPTS_INIT;
        so.scheduler = 0;
        e = troupe__spawn(rt, &proxy_def, &so, &proxy, false);
    }
    if (e != TROUPE_OK) {
        /* Nothing has run yet: no thread started a loop. */
        troupe_log(&rt->logger, TROUPE_LOG_ERROR, "runtime",
                   "runtime_create failed (%s): aborting", troupe_err_name(e));
        abort(); /* partial teardown of started workers is not worth it */
    }
    rt->proxy_addr = proxy;
    rt->proxy = atomic_load(&troupe__slot_get(rt, proxy.slot)->actor);
    for (unsigned i = 0; i < rt->n_sched; i++) {
        struct sched *s = &rt->scheds[i];
        if (s->embedded)
            continue;
        if (pthread_create(&s->thread, NULL, sched_main, s) != 0) {
            troupe_log(&rt->logger, TROUPE_LOG_ERROR, "runtime",
                       "cannot start the thread of scheduler %u: aborting", i);
            abort();
        }
        s->thread_started = true;
    }
    (void)inited;
    *out = rt;
    return TROUPE_OK;
}

const troupe_logger *
troupe_runtime_logger(const troupe_runtime *rt)
{
    static const troupe_logger default_logger = {0};
    return rt != NULL ? &rt->logger : &default_logger;
}

unsigned
troupe_runtime_schedulers(const troupe_runtime *rt)
{
    return rt ? rt->n_sched : 0;
}

uint32_t
troupe_runtime_node_id(const troupe_runtime *rt)
{
    return rt ? rt->node_id : 0;
}

uv_loop_t *
troupe_runtime_loop(troupe_runtime *rt, unsigned i)
{
    return rt && i < rt->n_sched ? rt->scheds[i].loop : NULL;
}

void
troupe_runtime_set_remote(troupe_runtime *rt, const troupe_remote_ops *ops,
                          void *ctx)
{
    if (rt == NULL)
        return;
    if (ops == NULL) {
        atomic_store(&rt->remote, NULL);
        return;
    }
    atomic_store(&rt->remote_ctx, ctx);
    atomic_store(&rt->remote, ops);
}

/* ---- sends from outside any actor ---- */

static troupe_err
reject(troupe_msg **m, troupe_err e)
{
    if (m != NULL) {
        troupe_msg_destroy(*m);
        *m = NULL;
    }
    return e;
}

troupe_err
troupe_runtime_send(troupe_runtime *rt, troupe_addr to, troupe_msg **m)
{
    if (m == NULL || *m == NULL)
        return TROUPE_EINVAL;
    if (rt == NULL || troupe_addr_is_none(to))
        return reject(m, TROUPE_EINVAL);
    /* Replies and adapter completions (ptr set) still reach live actors
     * while shutdown drains them; new requests do not. */
    bool completion = (*m)->ptr != NULL || ((*m)->flags & TROUPE_MSG_REPLY);
    if (!completion && atomic_load(&rt->phase) != RT_RUNNING)
        return reject(m, TROUPE_ECLOSED);
    (*m)->flags &= ~(uint32_t)TROUPE_MSG_SYSTEM;
    troupe__msg_of(*m)->pflags = 0;
    return troupe__post(rt, NULL, to, m, completion);
}

/* Answers a refused ask from another node at once. The reply names the
 * target as its sender, so it matches the ask at the asker's node, and it
 * goes through the transport's bounded queues, which may refuse it. */
static void
refusal_reply(troupe_runtime *rt, troupe_addr asker, troupe_addr target,
              uint64_t corr, troupe_err err)
{
    troupe_msg *r = NULL;
    if (troupe_msg_create(&r, 0, NULL, 0) != TROUPE_OK) {
        atomic_fetch_add_explicit(&rt->st_error_replies_lost, 1,
                                  memory_order_relaxed);
        return;
    }
    r->flags = TROUPE_MSG_REPLY;
    r->from = target;
    r->corr = corr;
    r->err = err;
    troupe_err e = troupe__post(rt, NULL, asker, &r, true);
    atomic_fetch_add_explicit(e == TROUPE_OK ? &rt->st_error_replies
                                             : &rt->st_error_replies_lost,
                              1, memory_order_relaxed);
}

troupe_err
troupe_runtime_deliver(troupe_runtime *rt, troupe_msg **m)
{
    if (m == NULL || *m == NULL)
        return TROUPE_EINVAL;
    if (rt == NULL || (*m)->to.node != rt->node_id || (*m)->ptr != NULL)
        return reject(m, TROUPE_EINVAL);
    troupe_msg *msg = *m;
    msg->flags &= TROUPE__MSG_WIRE_FLAGS;
    troupe__msg_of(msg)->pflags = TROUPE__MSG_NET;
    bool reply = (msg->flags & TROUPE_MSG_REPLY) != 0;
    /* Only an ask from another node is answered: a reply is never
     * answered, and one claiming a local asker would make this node
     * answer itself. */
    bool ask = !reply && msg->corr != 0 && !troupe_addr_is_none(msg->from) &&
               msg->from.node != rt->node_id;
    troupe_addr asker = msg->from, target = msg->to;
    uint64_t corr = msg->corr;
    troupe_err e = troupe__post(rt, NULL, target, m, reply);
    if (e == TROUPE_OK)
        return e;
    _Atomic uint64_t *ctr = e == TROUPE_EINVAL  ? &rt->st_refused_kind
                            : e == TROUPE_EFULL ? &rt->st_refused_full
                                                : &rt->st_refused_dead;
    atomic_fetch_add_explicit(ctr, 1, memory_order_relaxed);
    if (ask && (e == TROUPE_EDEAD || e == TROUPE_EFULL || e == TROUPE_EINVAL))
        refusal_reply(rt, asker, target, corr, e);
    return e;
}

void
troupe_runtime_stats_get(const troupe_runtime *rt, troupe_runtime_stats *out)
{
    if (out == NULL)
        return;
    memset(out, 0, sizeof(*out));
    if (rt == NULL)
        return;
    troupe_runtime *r = (troupe_runtime *)rt; /* atomics: loads only */
#define LOAD(f) atomic_load_explicit(&r->f, memory_order_relaxed)
    out->remote_refused_kind = LOAD(st_refused_kind);
    out->remote_refused_dead = LOAD(st_refused_dead);
    out->remote_refused_full = LOAD(st_refused_full);
    out->error_replies = LOAD(st_error_replies);
    out->error_replies_lost = LOAD(st_error_replies_lost);
    out->mailbox_full = LOAD(st_mailbox_full);
    out->net_bytes = LOAD(net_bytes);
    out->work_refused = LOAD(st_work_refused);
    out->work_cancelled = LOAD(st_work_cancelled);
#undef LOAD
}

troupe_err
troupe_runtime_reply(troupe_runtime *rt, troupe_addr to, uint64_t corr,
                     troupe_err err, troupe_body **body)
{
    troupe_body *b = body != NULL ? *body : NULL;
    if (body != NULL)
        *body = NULL;
    if (rt == NULL || (corr != 0 && troupe_addr_is_none(to))) {
        troupe_body_release(b);
        return TROUPE_EINVAL;
    }
    if (corr == 0) {
        troupe_body_release(b);
        return TROUPE_OK;
    }
    troupe_msg *r = NULL;
    troupe_err e = troupe_msg_create_body(&r, 0, &b);
    if (e != TROUPE_OK)
        return e;
    r->corr = corr;
    r->err = err;
    r->flags = TROUPE_MSG_REPLY;
    r->from = (troupe_addr){rt->node_id, 0, 0}; /* this node, no actor */
    return troupe_runtime_send(rt, to, &r);
}

struct host_ask {
    troupe_addr to;
    troupe_msg *m;
    uint32_t timeout_ms;
    troupe_reply_cb cb;
    void *arg;
};

/* On scheduler 0's thread: registers the ask with the host proxy and
 * posts *m (consumed). On error cb is not registered and never fires. */
static troupe_err
ask_on_sched0(struct sched *s, troupe_addr to, troupe_msg **m,
              uint32_t timeout_ms, troupe_reply_cb cb, void *arg)
{
    troupe_runtime *rt = s->rt;
    uint64_t c = troupe__corr_next(s);
    troupe_err e =
        troupe__ask_register(s, c, rt->proxy_addr, to, 0, timeout_ms, cb, arg);
    if (e != TROUPE_OK)
        return reject(m, e);
    (*m)->corr = c;
    (*m)->from = rt->proxy_addr;
    (*m)->deadline = troupe_now_ms() + timeout_ms;
    e = troupe__post(rt, s, to, m, false);
    if (e != TROUPE_OK)
        troupe__ask_unregister(s, c);
    return e;
}

static void
host_ask_on_sched0(struct sched *s, void *arg)
{
    struct host_ask *ha = arg;
    troupe_err e =
        ask_on_sched0(s, ha->to, &ha->m, ha->timeout_ms, ha->cb, ha->arg);
    if (e != TROUPE_OK)
        ha->cb(s->rt, e, NULL, ha->arg);
    troupe_free(ha);
}

troupe_err
troupe_runtime_ask(troupe_runtime *rt, troupe_addr to, troupe_msg **m,
                   uint32_t timeout_ms, troupe_reply_cb cb, void *arg)
{
    if (m == NULL || *m == NULL)
        return TROUPE_EINVAL;
    if (rt == NULL || cb == NULL || timeout_ms == 0 || troupe_addr_is_none(to))
        return reject(m, TROUPE_EINVAL);
    if (atomic_load(&rt->phase) != RT_RUNNING)
        return reject(m, TROUPE_ECLOSED);
    if (to.node == rt->node_id && !troupe__addr_alive(rt, to))
        return reject(m, TROUPE_EDEAD);
    (*m)->flags &= ~(uint32_t)(TROUPE_MSG_SYSTEM | TROUPE_MSG_REPLY);
    troupe__msg_of(*m)->pflags = 0;
    /* Already on scheduler 0 (a host callback asking again, the common
     * case): register and post here, without the control queue's
     * allocation and a wakeup of this very thread. */
    if (troupe__sched_current() == &rt->scheds[0])
        return ask_on_sched0(&rt->scheds[0], to, m, timeout_ms, cb, arg);
    struct host_ask *ha = troupe_malloc(sizeof(*ha));
    if (ha == NULL)
        return reject(m, TROUPE_ENOMEM);
    ha->to = to;
    ha->m = *m;
    *m = NULL;
    ha->timeout_ms = timeout_ms;
    ha->cb = cb;
    ha->arg = arg;
    troupe_err e = troupe__ctl(&rt->scheds[0], host_ask_on_sched0, ha);
    if (e != TROUPE_OK) {
        troupe_msg_destroy(ha->m);
        troupe_free(ha);
    }
    return e;
}

/* ---- registry ---- */

static uint32_t
hash_name(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h % 64;
}

static troupe_err
check_name(const char *name)
{
    if (name == NULL)
        return TROUPE_EINVAL;
    size_t n = strnlen(name, 256);
    return n == 0 || n > 255 ? TROUPE_EINVAL : TROUPE_OK;
}

troupe_err
troupe_registry_add(troupe_runtime *rt, const char *name, troupe_addr a)
{
    if (rt == NULL || check_name(name) != TROUPE_OK || troupe_addr_is_none(a))
        return TROUPE_EINVAL;
    pthread_mutex_lock(&rt->reg_lock);
    struct regent **pp = &rt->reg[hash_name(name)];
    for (; *pp; pp = &(*pp)->next) {
        if (strcmp((*pp)->name, name) == 0) {
            if (troupe__addr_alive(rt, (*pp)->addr) ||
                (*pp)->addr.node != rt->node_id) {
                pthread_mutex_unlock(&rt->reg_lock);
                return TROUPE_EEXIST;
            }
            (*pp)->addr = a; /* the holder died: take the name over */
            pthread_mutex_unlock(&rt->reg_lock);
            return TROUPE_OK;
        }
    }
    struct regent *r = troupe_malloc(sizeof(*r));
    char *copy = troupe_strdup(name);
    if (r == NULL || copy == NULL) {
        pthread_mutex_unlock(&rt->reg_lock);
        troupe_free(r);
        troupe_free(copy);
        return TROUPE_ENOMEM;
    }
    r->name = copy;
    r->addr = a;
    r->next = NULL;
    *pp = r;
    pthread_mutex_unlock(&rt->reg_lock);
    return TROUPE_OK;
}

troupe_err
troupe_registry_remove(troupe_runtime *rt, const char *name)
{
    if (rt == NULL || check_name(name) != TROUPE_OK)
        return TROUPE_EINVAL;
    pthread_mutex_lock(&rt->reg_lock);
    for (struct regent **pp = &rt->reg[hash_name(name)]; *pp;
         pp = &(*pp)->next) {
        if (strcmp((*pp)->name, name) == 0) {
            struct regent *r = *pp;
            *pp = r->next;
            pthread_mutex_unlock(&rt->reg_lock);
            troupe_free(r->name);
            troupe_free(r);
            return TROUPE_OK;
        }
    }
    pthread_mutex_unlock(&rt->reg_lock);
    return TROUPE_ENOENT;
}

troupe_err
troupe_registry_lookup(troupe_runtime *rt, const char *name, troupe_addr *a)
{
    if (rt == NULL || a == NULL || check_name(name) != TROUPE_OK)
        return TROUPE_EINVAL;
    pthread_mutex_lock(&rt->reg_lock);
    for (struct regent **pp = &rt->reg[hash_name(name)]; *pp;
         pp = &(*pp)->next) {
        struct regent *r = *pp;
        if (strcmp(r->name, name) != 0)
            continue;
        if (r->addr.node == rt->node_id && !troupe__addr_alive(rt, r->addr)) {
            /* The holder stopped: names die with their actor. */
            *pp = r->next;
            pthread_mutex_unlock(&rt->reg_lock);
            troupe_free(r->name);
            troupe_free(r);
            return TROUPE_ENOENT;
        }
        *a = r->addr;
        pthread_mutex_unlock(&rt->reg_lock);
        return TROUPE_OK;
    }
    pthread_mutex_unlock(&rt->reg_lock);
    return TROUPE_ENOENT;
}

/* ---- shutdown ---- */

static void
sched_handle_closed(uv_handle_t *h);

static void
close_sched_handles(struct sched *s)
{
    pthread_mutex_lock(&s->ctl_lock);
    s->ctl_closed = true;
    pthread_mutex_unlock(&s->ctl_lock);
    /* Calls queued before the close still run, exactly once. */
    troupe__run_ctl(s);
    troupe__ask_close_all(s);
    s->n_open_handles = 3;
    uv_close((uv_handle_t *)&s->wake, sched_handle_closed);
    uv_close((uv_handle_t *)&s->runner, sched_handle_closed);
    uv_close((uv_handle_t *)&s->ask_timer, sched_handle_closed);
}

static void
free_proxy(troupe_runtime *rt)
{
    troupe_actor *proxy = rt->proxy;
    rt->proxy = NULL;
    if (proxy == NULL)
        return;
    troupe_msg *m = atomic_exchange(&proxy->inbox, NULL);
    while (m != NULL) {
        troupe_msg *next = atomic_load(&troupe__msg_of(m)->next);
        troupe__net_release(rt, m);
        troupe_msg_destroy(m);
        m = next;
    }
    for (m = proxy->mhead; m != NULL;) {
        troupe_msg *next = atomic_load(&troupe__msg_of(m)->next);
        troupe__net_release(rt, m);
        troupe_msg_destroy(m);
        m = next;
    }
    troupe_free(proxy->ext);
    troupe_free(proxy);
}

static void
all_done(troupe_runtime *rt)
{
    free_proxy(rt);
    troupe_shutdown_cb cb = rt->shutdown_cb;
    void *arg = rt->shutdown_arg;
    pthread_mutex_lock(&rt->done_lock);
    rt->done = true;
    atomic_store(&rt->phase, RT_DONE);
    pthread_cond_broadcast(&rt->done_cond);
    pthread_mutex_unlock(&rt->done_lock);
    if (cb != NULL)
        cb(rt, arg);
}

static void
sched_handle_closed(uv_handle_t *h)
{
    struct sched *s = h->data;
    /* The eventfd stays open until destroy: a thread that queued the last
     * control call here (the pool's last worker, another scheduler) may
     * still be writing its wakeup to it. */
    if (--s->n_open_handles == 0 && s->idx == 0)
        all_done(s->rt);
}

static void
maybe_close_sched0(struct sched *s0)
{
    troupe_runtime *rt = s0->rt;
    if (!rt->workers_done || rt->n_closed != rt->n_sched - 1)
        return;
    /* The proxy is the last actor. Its slot is cleared now so nothing more
     * reaches it; it may still sit in the run queue, so it is freed only
     * after the runner handle has closed (all_done). */
    if (rt->proxy != NULL)
        troupe__slot_release(rt, rt->proxy->slot);
    close_sched_handles(s0);
}

static void
ctl_sched_closed(struct sched *s0, void *arg)
{
    (void)arg;
    s0->rt->n_closed++;
    maybe_close_sched0(s0);
}

void
troupe__on_workers_exited(struct sched *s0)
{
    s0->rt->workers_done = true;
    maybe_close_sched0(s0);
}

static void
ctl_close_sched(struct sched *s, void *arg)
{
    (void)arg;
    troupe__ctl(&s->rt->scheds[0], ctl_sched_closed, NULL);
    close_sched_handles(s);
}

static void
ctl_finish(struct sched *s0, void *arg)
{
    (void)arg;
    troupe_runtime *rt = s0->rt;
    /* Host asks still pending can never be answered now. */
    troupe__ask_close_all(s0);
    for (unsigned i = 1; i < rt->n_sched; i++)
        troupe__ctl(&rt->scheds[i], ctl_close_sched, NULL);
    troupe__workers_stop(rt);
}

void
troupe__sched_drained(struct sched *s)
{
    if (s->drained)
        return;
    s->drained = true;
    troupe_runtime *rt = s->rt;
    if (atomic_fetch_add(&rt->n_drained, 1) + 1 == rt->n_sched)
        troupe__ctl(&rt->scheds[0], ctl_finish, NULL);
}

troupe_err
troupe_runtime_shutdown(troupe_runtime *rt, troupe_shutdown_cb cb, void *arg)
{
    if (rt == NULL)
        return TROUPE_EINVAL;
    int want = RT_RUNNING;
    if (!atomic_compare_exchange_strong(&rt->phase, &want, RT_CLOSING))
        return TROUPE_ESTATE;
    rt->shutdown_cb = cb;
    rt->shutdown_arg = arg;
    for (unsigned i = 0; i < rt->n_sched; i++)
        troupe__ctl(&rt->scheds[i], troupe__shutdown_sched, NULL);
    return TROUPE_OK;
}

troupe_err
troupe_runtime_shutdown_wait(troupe_runtime *rt)
{
    if (rt == NULL)
        return TROUPE_EINVAL;
    if (rt->scheds[0].embedded)
        return TROUPE_ESTATE;
    troupe_err e = troupe__block_check("troupe_runtime_shutdown_wait");
    if (e != TROUPE_OK)
        return e;
    e = troupe_runtime_shutdown(rt, NULL, NULL);
    if (e != TROUPE_OK && e != TROUPE_ESTATE)
        return e;
    pthread_mutex_lock(&rt->done_lock);
    while (!rt->done)
        pthread_cond_wait(&rt->done_cond, &rt->done_lock);
    pthread_mutex_unlock(&rt->done_lock);
    return TROUPE_OK;
}

void
troupe_runtime_destroy(troupe_runtime *rt)
{
    if (rt == NULL)
        return;
    pthread_mutex_lock(&rt->done_lock);
    bool done = rt->done;
    pthread_mutex_unlock(&rt->done_lock);
    if (!done) {
        /* A programming error, and the process ends here: written
         * directly, since the logger's fn may belong to what the caller
         * is tearing down. */
        fprintf(stderr, "troupe: runtime_destroy before shutdown completed\n");
        abort();
    }
    for (unsigned i = 0; i < rt->n_sched; i++) {
        struct sched *s = &rt->scheds[i];
        if (s->thread_started)
            pthread_join(s->thread, NULL);
        if (!s->embedded) {
            uv_run(&s->own_loop, UV_RUN_DEFAULT); /* close callbacks */
            if (uv_loop_close(&s->own_loop) != 0)
                troupe_log(&rt->logger, TROUPE_LOG_ERROR, "runtime",
                           "the loop of scheduler %u did not close: a handle "
                           "is still open",
                           i);
        }
        pthread_mutex_destroy(&s->ctl_lock);
    }
    troupe__workers_join(rt);
    /* after the pool: no callback task runs any more */
    troupe__disp_free(rt);
    /* Every thread that could wake a scheduler has been joined. */
    for (unsigned i = 0; i < rt->n_sched; i++)
        close(rt->scheds[i].wake_fd);
    for (unsigned i = 0; i < SLOT_MAX_PAGES; i++)
        troupe_free(atomic_load(&rt->pages[i]));
    for (unsigned i = 0; i < 64; i++) {
        struct regent *r = rt->reg[i];
        while (r) {
            struct regent *next = r->next;
            troupe_free(r->name);
            troupe_free(r);
            r = next;
        }
    }
    for (unsigned i = 0; i < SLOT_STRIPES; i++)
        pthread_mutex_destroy(&rt->stripes[i]);
    pthread_mutex_destroy(&rt->slot_lock);
    pthread_mutex_destroy(&rt->reg_lock);
    pthread_mutex_destroy(&rt->disp_lock);
    pthread_mutex_destroy(&rt->done_lock);
    pthread_cond_destroy(&rt->done_cond);
    troupe_free(rt->scheds);
    troupe_free(rt);
}

troupe_err
troupe_runtime_post(troupe_runtime *rt,
                    void (*fn)(void *arg, troupe_runtime *rt), void *arg)
{
    if (rt == NULL || fn == NULL)
        return TROUPE_EINVAL;
    return troupe__ctl_post(&rt->scheds[0], fn, arg);
}
