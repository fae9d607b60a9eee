/*
 * Dispatch: one way for troupe to hand work to a host, whatever the work
 * (a queue event, later a coordinator branch or a message to an actor the
 * host implements) and whatever the host (C on its own threads, Node or
 * Python pulling through the flat ABI).
 *
 * A target is a name served in one mode:
 * - callback: a C function run on the HOST lane of the runtime's worker
 *   pool, one call per task;
 * - pull: tasks wait in the ready queue of a host endpoint (troupe_host)
 *   until the host takes them (troupe_host_next / _next_batch) and
 *   answers (troupe_host_reply / _reply_batch).
 * Producers (troupe's actors) submit tasks to a target by name; each
 * target holds at most `credit` tasks at once and a producer waits for
 * credit, so nothing piles up in memory.
 *
 * Outcomes are the coordinator's four. A task settles exactly once, with
 * the first of: its answer (a callback's return, a host's reply), its
 * deadline (the target's timeout after it was submitted), its target's or
 * host's close. Anything but a defined answer in time counts as UNKNOWN,
 * never as FAILURE: a deadline passed, an undefined code, a callback that
 * returns garbage, a host that went away. A reply after the task settled
 * is refused (ETIMEDOUT when the deadline settled it, ENOENT otherwise)
 * and changes nothing. What UNKNOWN means is the producer's: the queue
 * leaves the event pending.
 *
 * Objects and owners: troupe_target_create and troupe_host_open allocate
 * objects the caller owns; they borrow the runtime, which must outlive
 * them (destroy them before troupe_runtime_destroy). A pull target
 * borrows its host: destroy the target first. Every call may come from any
 * thread; the blocking ones say so and refuse (EDEADLK) on a troupe
 * thread.
 */
#ifndef TROUPE_DISPATCH_H
#define TROUPE_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/err.h"
#include "troupe/runtime.h"

typedef enum troupe_outcome {
    TROUPE_OUTCOME_SUCCESS = 1,
    TROUPE_OUTCOME_FAILURE = 2, /* definite: the producer may compensate */
    TROUPE_OUTCOME_ONGOING = 3, /* not finished: ask again later */
    TROUPE_OUTCOME_UNKNOWN = 4  /* may or may not have taken effect */
} troupe_outcome;

/* What a task is for; its header's format is the kind's. */
typedef enum troupe_task_kind {
    TROUPE_TASK_QUEUE = 1, /* a queue event (docs/queue.md) */
    TROUPE_TASK_ACTOR = 2, /* a message to a host-implemented actor
                              (troupe/hostactor.h: its 32-byte header) */
    /* the result of a host's request (bindings/c: troupe/abi.h): header
     * i32 status, u32 0; the record's id is the request's; no reply */
    TROUPE_TASK_COMPLETION = 3,
    /* a global transaction's branch (troupe/coordinator.h): header four
     * NUL-terminated strings, mode, gid, branch id, op ("saga", "g-1",
     * "01", "action"), the barrier's fields; body the branch's payload */
    TROUPE_TASK_BRANCH = 4,
    /* a run of a workflow (troupe/workflow.h): header as a branch's, mode
     * "workflow", branch id "00", op "run"; body [input bin, records],
     * the reply's body [end, reason, updates] (docs/coordinator.md,
     * "Workflows") */
    TROUPE_TASK_WORKFLOW = 5,
    TROUPE_TASK_TEST = 15 /* for tests and benches: any header */
} troupe_task_kind;

/* Limits: a target's name, a task's header and body, credit, timeout. */
#define TROUPE_TARGET_NAME_MAX 255
#define TROUPE_TASK_HEADER_MAX 4096
#define TROUPE_TASK_BODY_MAX (16u << 20)
#define TROUPE_TARGET_CREDIT_MAX 65536
#define TROUPE_TARGET_CREDIT_DEFAULT 64
#define TROUPE_TARGET_TIMEOUT_DEFAULT_MS 30000

/* A task as a callback sees it; every pointer is borrowed for the call. */
typedef struct troupe_task {
    uint64_t id;
    const char *target;
    troupe_task_kind kind;
    uint32_t attempt;    /* the producer's count, 1 for the first */
    int64_t deadline_ms; /* Unix ms: an answer after it is refused */
    const uint8_t *header;
    size_t header_len;
    const uint8_t *body;
    size_t body_len;
} troupe_task;

/* Where a callback leaves its reply body (copied; at most
 * TROUPE_TASK_BODY_MAX bytes). */
typedef struct troupe_task_reply troupe_task_reply;

/* Copies len bytes as the reply's body (a second call replaces the
 * first). Errors: EINVAL (NULL r, or NULL data with len > 0), ETOOBIG,
 * ENOMEM. */
troupe_err
troupe_task_reply_set(troupe_task_reply *r, const void *data, size_t len);

/* A callback target's function: runs on the HOST lane (host code may
 * block there without delaying storage work), borrows *t and *r for the
 * call, and returns the outcome. Anything but the four outcomes counts as
 * UNKNOWN. A return after the deadline is dropped (the task settled
 * UNKNOWN meanwhile, and its credit came back then: a call past its
 * deadline no longer counts against the credit, nor holds up a stop). */
typedef troupe_outcome (*troupe_task_fn)(const troupe_task *t,
                                         troupe_task_reply *r, void *arg);

typedef struct troupe_host troupe_host;
typedef struct troupe_target troupe_target;

typedef struct troupe_target_opts {
    const char *name; /* 1..TROUPE_TARGET_NAME_MAX bytes, no NUL */
    /* Exactly one of: fn (callback mode; arg to it, which must outlive
     * the target's stop and every call of fn still running past its
     * deadline) or host (pull mode; borrowed). */
    troupe_task_fn fn;
    void *arg;
    troupe_host *host;
    uint32_t credit;     /* tasks held at once: 1..65536; 0: 64 */
    uint32_t timeout_ms; /* from submit to answer; 0: 30000 */
} troupe_target_opts;

/*
 * Registers a target under its name on rt. Errors: EINVAL (NULL, bad
 * name, neither or both modes, credit over the maximum), EEXIST (the name
 * is taken on rt), ESTATE (the host is closing), ECLOSED (rt shut down),
 * ENOMEM, ESYS (no deadline thread). Never blocks.
 */
troupe_err
troupe_target_create(troupe_runtime *rt, const troupe_target_opts *o,
                     troupe_target **out);

typedef void (*troupe_target_stop_cb)(troupe_target *t, void *arg);

/*
 * Stops a target: its name is free again at once and producers are
 * refused (ESTATE); tasks still queued for a host settle UNKNOWN; tasks
 * running (a callback, a host holding them) settle as they would (answer
 * or deadline: a callback past its deadline runs on, uncounted); then
 * cb(t, arg) once, on the thread that settled the last one (here and now
 * when none was running). Errors (cb never fires):
 * EINVAL, ESTATE (stopping already).
 */
troupe_err
troupe_target_stop(troupe_target *t, troupe_target_stop_cb cb, void *arg);

/* troupe_target_stop and a wait for its callback; its errors, and
 * EDEADLK on a troupe thread. Blocks (at most the target's timeout). */
troupe_err
troupe_target_stop_wait(troupe_target *t);

/* Frees a stopped target (its memory goes with the return of the last
 * callback still running past its deadline). NULL is a no-op; a target
 * that was not stopped is a programming error: abort(). */
void
troupe_target_destroy(troupe_target *t);

/* Counters since create; relaxed reads. */
typedef struct troupe_target_stats {
    uint64_t submitted;
    uint64_t settled[5];  /* by outcome (index 1..4) */
    uint64_t timed_out;   /* settled UNKNOWN by the deadline */
    uint64_t late;        /* answers refused after the task settled */
    uint64_t bad_outcome; /* answers with an undefined code */
    uint32_t held;        /* tasks held now (a callback past its
                             deadline is not) */
} troupe_target_stats;

void
troupe_target_stats_get(const troupe_target *t, troupe_target_stats *out);

/* The index a pull target's task records carry (troupe_host_next), fixed
 * from its create to its destroy; 0 for a callback target or NULL. */
uint32_t
troupe_target_host_index(const troupe_target *t);

/* ---- pull: the host endpoint -------------------------------------------- */

typedef struct troupe_host_opts {
    uint32_t reserved; /* 0 */
} troupe_host_opts;

/*
 * Opens a pull endpoint on rt: one ready queue for the pull targets
 * created on it, its wake fd, and, when a wake callback is set, a
 * notifier thread. o may be NULL. Errors: EINVAL, ENOMEM, ESYS (no
 * eventfd). Never blocks.
 */
troupe_err
troupe_host_open(troupe_runtime *rt, const troupe_host_opts *o,
                 troupe_host **out);

/*
 * The wake fd: an eventfd that becomes readable when the ready queue goes
 * from empty to non-empty, edge-triggered: it is written once, and not
 * again until a pull found the queue empty (which also reads it back to
 * not readable). A host drains with non-blocking pulls until one finds
 * nothing, then waits for the fd. A wake may find nothing to pull (the
 * records it announced were taken by a drain already running): it is a
 * hint to drain, never proof that a record waits. Owned by the host
 * endpoint: never close it. -1 for NULL.
 */
int
troupe_host_wake_fd(const troupe_host *h);

/*
 * Sets (or with fn NULL, clears) a wake callback: fn(arg) is called, on
 * the endpoint's notifier thread only, when the fd would be written. The
 * notifier holds no troupe lock and nothing waits on it, so fn may call
 * back into troupe (a pull, a reply). Clearing returns once no call of
 * the old fn is running and none will start. Errors: EINVAL, ESTATE
 * (closing), ESYS (no thread), EDEADLK (clearing from inside fn). Never
 * blocks but for a call of fn in flight.
 */
troupe_err
troupe_host_set_wake(troupe_host *h, void (*fn)(void *arg), void *arg);

/*
 * One task record in buf (packed, little-endian, 8-aligned):
 *   u64 id, u32 target index (troupe_host_target_name), u16 kind,
 *   u16 header_len, u32 attempt, u32 body_len, i64 deadline_ms,
 *   header bytes, body bytes, zero padding to a multiple of 8.
 * TROUPE_HOST_RECORD_FIXED is the fixed part's size.
 */
#define TROUPE_HOST_RECORD_FIXED 32u

/* The size of a record for header and body lengths. */
#define TROUPE_HOST_RECORD_SIZE(hl, bl)                                        \
    ((TROUPE_HOST_RECORD_FIXED + (size_t)(hl) + (size_t)(bl) + 7u) &           \
     ~(size_t)7u)

/*
 * Takes the next ready record into buf; *len gets its size (0 when none
 * was ready). Completions (kind TROUPE_TASK_COMPLETION, target index 0,
 * posted by troupe's bindings: they need no reply) come before tasks; a
 * completion that does not fit cap is ETOOBIG with *len the size needed
 * and stays first in line. timeout_ms: 0 never blocks (event-loop hosts must
 * pass 0); > 0 waits up to that long for one (refused with EDEADLK on a
 * troupe thread); < 0 is EINVAL. A record that does not fit cap is
 * ETOOBIG: *len gets the size needed and the task settles UNKNOWN (its
 * producer offers it again). The task is the host's until it replies or
 * its deadline passes. Errors: EINVAL, ETOOBIG, ECLOSED (closing),
 * EDEADLK.
 */
troupe_err
troupe_host_next(troupe_host *h, int timeout_ms, void *buf, size_t cap,
                 size_t *len);

/* Up to max records back to back in buf (each 8-aligned); *n records,
 * *len bytes. Waits as troupe_host_next for the first only. A record
 * that does not fit after at least one was written stays ready; one that
 * cannot fit an empty buf is ETOOBIG as above (with *n 0). */
troupe_err
troupe_host_next_batch(troupe_host *h, int timeout_ms, void *buf, size_t cap,
                       size_t max, size_t *n, size_t *len);

/*
 * Answers a task the host took. Errors (nothing changes): EINVAL (NULL,
 * body NULL with len > 0, or outcome undefined: then the task settles
 * UNKNOWN, counted as bad_outcome), ETOOBIG (body too long: the task
 * settles UNKNOWN), ETIMEDOUT (the deadline settled it), ENOENT (no such
 * task in the host's hands: settled, never taken, or from another host).
 * Never blocks.
 */
troupe_err
troupe_host_reply(troupe_host *h, uint64_t id, uint32_t outcome,
                  const void *body, size_t len);

/*
 * Answers in one call the replies packed in buf, each 8-aligned:
 *   u64 id, u32 outcome, u32 body_len, body bytes, zero padding to 8.
 * Each is answered as troupe_host_reply; *done counts the replies
 * answered OK, *refused the ones refused (late, unknown, bad). Errors:
 * EINVAL (NULL), EPROTO (a record past the end of buf: those before it
 * were answered). Never blocks.
 */
troupe_err
troupe_host_reply_batch(troupe_host *h, const void *buf, size_t len,
                        size_t *done, size_t *refused);

/* The name of the target whose index a record carries (borrowed until
 * that target is destroyed), or NULL. */
const char *
troupe_host_target_name(const troupe_host *h, uint32_t index);

/*
 * Closes the endpoint: pulls return ECLOSED from now on; every task ready
 * or in the host's hands settles UNKNOWN (the host went away); producers
 * submitting to its targets are refused (ECLOSED); the wake callback is
 * cleared (as troupe_host_set_wake with NULL). Its targets are then
 * stopped and destroyed as usual (their stop completes at once). Errors:
 * EINVAL, ESTATE (closed already), EDEADLK (from inside the wake
 * callback). Never blocks but for a call of the wake callback in flight.
 */
troupe_err
troupe_host_close(troupe_host *h);

/* Frees a closed endpoint (joins its notifier thread, waits for a wake
 * a producer is writing, closes the fd).
 * NULL is a no-op; an endpoint not closed, or with targets not destroyed,
 * is a programming error: abort(). */
void
troupe_host_destroy(troupe_host *h);

#endif
