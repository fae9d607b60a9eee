/*
 * The dispatch's producer side (troupe/dispatch.h is the consumer's): for
 * troupe's own actors that hand work to hosts (the queue partition, later
 * the coordinator and host-implemented actors).
 *
 * A producer finds its target by name, takes a credit, submits a task and
 * hears its outcome once, through done, on the thread that settled it (a
 * HOST lane thread, the host's thread that replied, the dispatch's
 * deadline thread, or the thread that stopped or closed). An actor posts
 * itself a message from there.
 */
#ifndef TROUPE_INTERNAL_DISPATCH_H
#define TROUPE_INTERNAL_DISPATCH_H

#include <stdbool.h>

#include "troupe/dispatch.h"

/* The target named `name` (len bytes) on rt, retained; NULL when none
 * (or it is stopping). Any thread. */
troupe_target *
troupe__target_find(troupe_runtime *rt, const char *name, size_t len);
void
troupe__target_retain(troupe_target *t);
/* Drops a reference; the last one of a destroyed target frees it. */
void
troupe__target_release(troupe_target *t);

/* Credit waiters: a producer's node, owned by the producer, queued on a
 * target while it waits for credit. */
typedef struct troupe__credit_wait {
    void (*kick)(void *arg); /* once per wait, on the thread that freed a
                                credit; must not block */
    void *arg;
    struct troupe__credit_wait *next;
    bool queued; /* the target's lock */
} troupe__credit_wait;

/*
 * Takes one credit: true, or false when the target holds `credit` tasks
 * (or is stopping). With w non-NULL, a false also queues w, and w->kick
 * fires once when a credit frees (or the target stops): then take again.
 * A kick may come although a take succeeded since (harmless). Any thread.
 */
bool
troupe__target_credit_take(troupe_target *t, troupe__credit_wait *w);

/* As troupe__target_credit_take, but takes nothing: true when a credit
 * is free now (a producer's look before it reads work to offer). */
bool
troupe__target_credit_peek(troupe_target *t, troupe__credit_wait *w);

/* Gives back a credit taken that will not be submitted under (as a
 * refused submit does; the last one of a stopping target ends its stop). */
void
troupe__target_credit_give(troupe_target *t);

/* Takes w off the target's wait list: no kick of w runs or starts after
 * this returns, so the caller may free w (it waits for a kick another
 * thread is calling; so never call it holding what a kick takes). */
void
troupe__target_credit_unwait(troupe_target *t, troupe__credit_wait *w);

/*
 * A task's outcome, once: body (borrowed for the call) is the reply's.
 * Returns false when the task ends here (its slot and credit free), true
 * when the producer ends it later with troupe__target_task_end, once what
 * it does with the outcome is done (the queue: once the outcome is
 * committed), so that the credit and a graceful stop wait for that.
 */
typedef bool (*troupe__task_done_fn)(void *arg, uint64_t id,
                                     troupe_outcome outcome,
                                     const uint8_t *body, size_t len);

typedef struct troupe__task_in {
    troupe_task_kind kind;
    uint32_t attempt;
    const void *header; /* copied */
    size_t header_len;
    const void *body; /* copied */
    size_t body_len;
} troupe__task_in;

/*
 * Submits a task under a credit taken (troupe__target_credit_take).
 * On OK done fires exactly once and *id (may be NULL) gets the task's id.
 * On error the credit is given back and done never fires: EINVAL (bad
 * kind, header or body too long), ESTATE (the target is stopping),
 * ECLOSED (its host closed, or the runtime's pool stopped), EBUSY (a
 * callback target whose spare slots, as many as its credit, are all
 * held by callbacks still running past their deadline), ENOMEM.
 * Never blocks.
 */
troupe_err
troupe__target_submit(troupe_target *t, const troupe__task_in *in,
                      troupe__task_done_fn done, void *arg, uint64_t *id);

/* Ends a task whose done returns true: frees its slot and credit. May
 * come from another thread while that done still runs (a commit callback
 * that completes first): the task then ends as done returns. */
void
troupe__target_task_end(troupe_target *t, uint64_t id);

/* Inside done: whether the task had been taken (its callback was running
 * or about to run, or a host held it) when it settled. A callback
 * producer whose done hears UNKNOWN learns from it whether its fn still
 * runs (true) or never will (false). */
bool
troupe__task_taken(troupe_target *t, uint64_t id);

/* ---- completions: records for a host that need no reply ----------------- */

/*
 * A completion is the result of a request a host made (bindings/c): a
 * record of kind TROUPE_TASK_COMPLETION in the host's ready queue, ahead
 * of its tasks, freed once pulled. A producer reserves one when it
 * accepts a request and posts it exactly once when the request is done
 * (or cancels it when the request was refused after all). The host
 * bounds them: reservations (requests in flight plus completions not yet
 * pulled) at most `count`, and no reservation while the completions not
 * yet pulled hold `bytes` or more. A reservation carries the memory of
 * an empty completion, so a post that cannot allocate its body still
 * delivers one (status ENOMEM).
 */
typedef struct troupe__completion troupe__completion;

#define TROUPE__COMPLETION_BODY_MAX (1u << 30)

/* Sets the bounds (0 keeps one as it is). Any thread. */
void
troupe__host_completion_limits(troupe_host *h, uint32_t count, uint64_t bytes);

/* Reserves a completion for request id. Errors: EBUSY (a bound is
 * reached), ECLOSED (the host closed), ENOMEM. Any thread; never blocks. */
troupe_err
troupe__completion_reserve(troupe_host *h, uint64_t id,
                           troupe__completion **out);

/* Posts c (consumed) with status and body (copied; len at most
 * TROUPE__COMPLETION_BODY_MAX, else ETOOBIG with an empty body) and
 * wakes the host as a task would. On a closed host it is dropped. Any
 * thread; never blocks. */
void
troupe__completion_post(troupe__completion *c, troupe_err status,
                        const void *body, size_t len);

/* Frees a reservation never posted. NULL is a no-op. */
void
troupe__completion_cancel(troupe__completion *c);

#endif
