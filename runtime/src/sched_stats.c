/*
 * Per-scheduler figures for monitoring (troupe_runtime_sched_stats_wait).
 *
 * An actor list belongs to its scheduler's thread, so the walk runs there,
 * posted on the control queue, and the caller waits for it. The obvious
 * alternative, a per-scheduler counter of queued messages kept by every
 * send and every turn, would put a shared atomic on the send path for the
 * sake of a monitoring read: the walk costs nothing until someone asks.
 */
#include <pthread.h>

#include "rt.h"
#include "troupe/internal/runtime.h"

struct sstat_req {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    troupe_sched_stats st;
};

static void
walk(struct sched *s, void *arg)
{
    struct sstat_req *r = arg;
    troupe_sched_stats st = {0};
    for (troupe_actor *a = s->actors; a != NULL; a = a->next) {
        if (a == s->rt->proxy)
            continue;
        uint32_t n = atomic_load_explicit(&a->count, memory_order_relaxed);
        st.actors++;
        st.queued += n;
        if (n > st.max_queued)
            st.max_queued = n;
    }
    pthread_mutex_lock(&r->mu);
    r->st = st;
    r->done = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

troupe_err
troupe_runtime_sched_stats_wait(troupe_runtime *rt, unsigned i,
                                troupe_sched_stats *out)
{
    if (rt == NULL || out == NULL || i >= rt->n_sched)
        return TROUPE_EINVAL;
    troupe_err be = troupe__block_check("troupe_runtime_sched_stats_wait");
    if (be != TROUPE_OK)
        return be;
    struct sstat_req r = {.done = false};
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    troupe_err e = troupe__ctl(&rt->scheds[i], walk, &r);
    if (e == TROUPE_OK) {
        pthread_mutex_lock(&r.mu);
        while (!r.done)
            pthread_cond_wait(&r.cv, &r.mu);
        pthread_mutex_unlock(&r.mu);
        *out = r.st;
    }
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
    return e;
}
