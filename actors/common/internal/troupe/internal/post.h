/*
 * Finishing on scheduler 0: the data layer's asynchronous calls complete
 * on scheduler 0 (the host's loop in embedded mode), whichever thread
 * their work ended on (a commit pipeline's writer, a worker, another
 * scheduler).
 */
#ifndef TROUPE_INTERNAL_POST_H
#define TROUPE_INTERNAL_POST_H

#include "troupe/runtime.h"

/* Runs fn(arg, rt) on scheduler 0 through troupe_runtime_post (never
 * inside this call); when that is refused (scheduler 0 has closed at
 * shutdown, or no memory), runs it here and now: there is no loop left
 * to run it on, and it must run exactly once. Any thread. */
void
troupe__post_or_run(troupe_runtime *rt,
                    void (*fn)(void *arg, troupe_runtime *rt), void *arg);

#endif
