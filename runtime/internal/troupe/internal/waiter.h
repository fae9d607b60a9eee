/*
 * A blocking waiter: a count that callers block on until it reaches 0,
 * with the first error and the last result the releases brought. The
 * blocking twins of asynchronous calls use it as a one-shot completion
 * (init(1), the callback releases, the caller waits); stops use it as a
 * count of things still running (init(1) for the stopper's own share,
 * hold per thing started, release per thing ended).
 *
 * The storage is the caller's (init/fini). Any thread may hold and
 * release; wait blocks the calling thread, so never call it on an event
 * loop that a release depends on. Safe to fini (and free) as soon as a
 * wait has returned: the release that brought the count to 0 touches the
 * waiter only under its mutex, which the wait takes after it.
 */
#ifndef TROUPE_INTERNAL_WAITER_H
#define TROUPE_INTERNAL_WAITER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "troupe/err.h"

typedef struct troupe__waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic size_t count;
    troupe_err err; /* the first error released; under mu */
    void *result;   /* the last non-NULL result released; under mu */
} troupe__waiter;

/* count: releases to wait for (1: a one-shot completion; 0: nothing yet,
 * a wait returns at once). */
void
troupe__waiter_init(troupe__waiter *w, size_t count);

/* Count + 1. Only while the count is above 0, or where a wait that saw 0
 * may already have returned (the queue worker checks its stop flag after
 * the hold, and its memory is held by references). */
void
troupe__waiter_hold(troupe__waiter *w);

/* Count - 1, keeping err if it is the first error and result if not
 * NULL; the release that brings the count to 0 wakes the waiters. A
 * release takes the mutex only when it may be the last one or carries
 * something to keep. Never more releases than init's count and holds. */
void
troupe__waiter_release(troupe__waiter *w, troupe_err err, void *result);

/* Blocks until the count is 0. Returns the first error released (OK if
 * none); *result (result may be NULL) gets the last result. */
troupe_err
troupe__waiter_wait(troupe__waiter *w, void **result);

void
troupe__waiter_fini(troupe__waiter *w);

/* The tail of a blocking twin: started is what the asynchronous call
 * returned. When it is an error the callback never fires (STYLE.md):
 * returns it at once with *result NULL. Otherwise waits and returns the
 * callback's error and result. Finis w either way. */
troupe_err
troupe__waiter_finish(troupe__waiter *w, troupe_err started, void **result);

#endif
