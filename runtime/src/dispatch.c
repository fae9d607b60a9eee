/*
 * The runtime's dispatch: the registry of targets by name and the one
 * deadline thread that settles overdue tasks UNKNOWN.
 *
 * Deadlines: every task of a target has the same timeout, so a target's
 * tasks in flight, kept in submit order, are also in deadline order and
 * its oldest is its next deadline. The thread sleeps until the earliest
 * of the targets' oldest, on a condition variable: nothing polls. A
 * submit wakes it only when the new deadline comes before the one it
 * sleeps to (so, under load, almost never: later tasks have later
 * deadlines). A thread rather than a timer on a scheduler, so that a
 * deadline is kept while every scheduler is busy or has shut down (a host
 * may still hold tasks then), and the thread holds no actor.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "disp.h"
#include "rt.h"
#include "troupe/internal/runtime.h"

uint64_t
troupe__mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The targets, each retained, into d->scan (d->mu held). */
static size_t
scan_targets(struct troupe__disp *d)
{
    size_t n = 0;
    for (troupe_target *t = d->targets; t != NULL; t = t->dnext)
        n++;
    if (n > d->scan_cap) {
        troupe_target **a = troupe_realloc(d->scan, n * sizeof(*a));
        if (a == NULL)
            n = d->scan_cap; /* this round sees the first ones */
        else {
            d->scan = a;
            d->scan_cap = n;
        }
    }
    size_t i = 0;
    for (troupe_target *t = d->targets; t != NULL && i < n; t = t->dnext) {
        troupe__target_retain(t);
        d->scan[i++] = t;
    }
    return i;
}

static void *
deadline_main(void *arg)
{
    struct troupe__disp *d = arg;
    pthread_mutex_lock(&d->mu);
    while (!d->quit) {
        /* Expiring settles, and a producer's done may submit (which
         * takes d->mu): the targets are expired with d->mu released,
         * each held by a reference. */
        size_t n = scan_targets(d);
        d->sleep_until_ns = 1; /* awake: a submit need not signal */
        pthread_mutex_unlock(&d->mu);
        uint64_t now = troupe__mono_ns(), next = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t due = troupe__target_expire(d->scan[i], now);
            if (due != 0 && (next == 0 || due < next))
                next = due;
            troupe__target_release(d->scan[i]);
        }
        pthread_mutex_lock(&d->mu);
        if (d->quit)
            break;
        if (d->woken) { /* a deadline came in while this round ran */
            d->woken = false;
            continue;
        }
        d->sleep_until_ns = next;
        if (next == 0) {
            pthread_cond_wait(&d->cond, &d->mu);
        } else {
            struct timespec ts = {.tv_sec = (time_t)(next / 1000000000u),
                                  .tv_nsec = (long)(next % 1000000000u)};
            pthread_cond_timedwait(&d->cond, &d->mu, &ts);
        }
        d->woken = false;
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

struct troupe__disp *
troupe__disp_get(troupe_runtime *rt, troupe_err *err)
{
    *err = TROUPE_OK;
    pthread_mutex_lock(&rt->disp_lock);
    struct troupe__disp *d = rt->disp;
    if (d != NULL) {
        pthread_mutex_unlock(&rt->disp_lock);
        return d;
    }
    d = troupe_calloc(1, sizeof(*d));
    if (d == NULL) {
        pthread_mutex_unlock(&rt->disp_lock);
        *err = TROUPE_ENOMEM;
        return NULL;
    }
    d->rt = rt;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&d->thread, NULL, deadline_main, d) != 0) {
        pthread_cond_destroy(&d->cond);
        pthread_mutex_destroy(&d->mu);
        troupe_free(d);
        pthread_mutex_unlock(&rt->disp_lock);
        *err = troupe__errf(TROUPE_ESYS, "no thread for the dispatch: %s",
                            strerror(errno));
        return NULL;
    }
    d->thread_started = true;
    rt->disp = d;
    pthread_mutex_unlock(&rt->disp_lock);
    return d;
}

void
troupe__disp_free(troupe_runtime *rt)
{
    struct troupe__disp *d = rt->disp;
    if (d == NULL)
        return;
    pthread_mutex_lock(&d->mu);
    bool live = d->targets != NULL;
    d->quit = true;
    pthread_cond_signal(&d->cond);
    pthread_mutex_unlock(&d->mu);
    if (live) {
        /* written directly: the logger may be what is being torn down */
        fprintf(stderr, "troupe: runtime_destroy with dispatch targets "
                        "not destroyed\n");
        abort();
    }
    pthread_join(d->thread, NULL);
    troupe_free(d->scan);
    pthread_cond_destroy(&d->cond);
    pthread_mutex_destroy(&d->mu);
    troupe_free(d);
    rt->disp = NULL;
}

static troupe_target *
find_locked(struct troupe__disp *d, const char *name, size_t len)
{
    for (troupe_target *t = d->targets; t != NULL; t = t->dnext)
        if (t->listed && t->name_len == len && memcmp(t->name, name, len) == 0)
            return t;
    return NULL;
}

troupe_err
troupe__disp_add(struct troupe__disp *d, troupe_target *t)
{
    pthread_mutex_lock(&d->mu);
    if (find_locked(d, t->name, t->name_len) != NULL) {
        pthread_mutex_unlock(&d->mu);
        return troupe__err_named(TROUPE_EEXIST, "dispatch target", t->name,
                                 t->name_len);
    }
    t->listed = true;
    t->dnext = d->targets;
    d->targets = t;
    pthread_mutex_unlock(&d->mu);
    return TROUPE_OK;
}

void
troupe__disp_unlist(struct troupe__disp *d, troupe_target *t)
{
    pthread_mutex_lock(&d->mu);
    t->listed = false;
    pthread_mutex_unlock(&d->mu);
}

void
troupe__disp_remove(struct troupe__disp *d, troupe_target *t)
{
    pthread_mutex_lock(&d->mu);
    for (troupe_target **pp = &d->targets; *pp != NULL; pp = &(*pp)->dnext)
        if (*pp == t) {
            *pp = t->dnext;
            break;
        }
    pthread_mutex_unlock(&d->mu);
}

void
troupe__disp_due(struct troupe__disp *d, uint64_t due_ns)
{
    /* Asleep until no later than due_ns: it wakes in time and its round
     * sees the task (linked before this call). Any other state takes the
     * lock: running (1), asleep for good (0), or asleep past due_ns. */
    uint64_t until = atomic_load(&d->sleep_until_ns);
    if (until > 1 && due_ns >= until)
        return;
    pthread_mutex_lock(&d->mu);
    if (d->sleep_until_ns == 1) {
        d->woken = true; /* the round running may have missed it */
    } else if (d->sleep_until_ns == 0 || due_ns < d->sleep_until_ns) {
        d->sleep_until_ns = due_ns;
        d->woken = true;
        pthread_cond_signal(&d->cond);
    }
    pthread_mutex_unlock(&d->mu);
}

troupe_target *
troupe__target_find(troupe_runtime *rt, const char *name, size_t len)
{
    if (rt == NULL || name == NULL)
        return NULL;
    pthread_mutex_lock(&rt->disp_lock);
    struct troupe__disp *d = rt->disp;
    pthread_mutex_unlock(&rt->disp_lock);
    if (d == NULL)
        return NULL;
    pthread_mutex_lock(&d->mu);
    troupe_target *t = find_locked(d, name, len);
    if (t != NULL)
        troupe__target_retain(t);
    pthread_mutex_unlock(&d->mu);
    return t;
}
