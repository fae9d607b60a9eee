/*
 * The blocking waiter (troupe/internal/waiter.h).
 *
 * The count is atomic so that a release that is not the last one costs a
 * compare-and-swap and no lock. The release that may be the last (it saw
 * 1) decrements under the mutex and broadcasts there, and a wait checks
 * the count under the same mutex: so a wait that sees 0 knows the last
 * release has left its critical section, and the waiter may be freed at
 * once (the stack frame of a blocking twin, a stopped object). A
 * decrement to 0 outside the mutex would let the wait return while that
 * release is still about to lock it.
 */
#include "troupe/internal/waiter.h"

void
troupe__waiter_init(troupe__waiter *w, size_t count)
{
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    atomic_init(&w->count, count);
    w->err = TROUPE_OK;
    w->result = NULL;
}

void
troupe__waiter_hold(troupe__waiter *w)
{
    atomic_fetch_add(&w->count, 1);
}

void
troupe__waiter_release(troupe__waiter *w, troupe_err err, void *result)
{
    if (err == TROUPE_OK && result == NULL) {
        size_t c = atomic_load(&w->count);
        while (c > 1)
            if (atomic_compare_exchange_weak(&w->count, &c, c - 1))
                return;
    }
    pthread_mutex_lock(&w->mu);
    if (err != TROUPE_OK && w->err == TROUPE_OK)
        w->err = err;
    if (result != NULL)
        w->result = result;
    if (atomic_fetch_sub(&w->count, 1) == 1)
        pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

troupe_err
troupe__waiter_wait(troupe__waiter *w, void **result)
{
    pthread_mutex_lock(&w->mu);
    while (atomic_load(&w->count) != 0)
        pthread_cond_wait(&w->cv, &w->mu);
    troupe_err e = w->err;
    if (result != NULL)
        *result = w->result;
    pthread_mutex_unlock(&w->mu);
    return e;
}

void
troupe__waiter_fini(troupe__waiter *w)
{
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

troupe_err
troupe__waiter_finish(troupe__waiter *w, troupe_err started, void **result)
{
    if (result != NULL)
        *result = NULL;
    troupe_err e = started;
    if (started == TROUPE_OK)
        e = troupe__waiter_wait(w, result);
    troupe__waiter_fini(w);
    return e;
}
