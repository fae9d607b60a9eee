/*
 * The runtime: N schedulers (one thread and one uv_loop_t each), a worker
 * pool for blocking work, a name registry, and the hook through which
 * protocols/ carries messages to other nodes.
 *
 * Modes:
 *  - standalone: opts.loop == NULL; the runtime starts `schedulers` threads.
 *  - embedded:   opts.loop is the host's loop; scheduler 0 runs on it and is
 *    driven by the host's uv_run. The runtime never blocks that loop; the
 *    remaining schedulers get threads of their own.
 *
 * Lifecycle: troupe_runtime_create -> use -> troupe_runtime_shutdown(cb) ->
 * cb fires -> troupe_runtime_destroy. In embedded mode the host keeps
 * running its loop until cb fires; after destroy the runtime has closed
 * every handle it put on the host's loop, so uv_loop_close succeeds.
 */
#ifndef TROUPE_RUNTIME_H
#define TROUPE_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/err.h"
#include "troupe/log.h"
#include "troupe/msg.h"

/* libuv's loop, declared rather than included: <uv.h> needs POSIX names
 * that plain -std=c11 hides, and a host that only uses standalone mode
 * never needs it. struct uv_loop_s is uv_loop_t; a host that passes or
 * drives a loop includes <uv.h> itself. */
struct uv_loop_s;

typedef struct troupe_runtime troupe_runtime;

/*
 * The worker pool has lanes, each with its own threads and queue, so that
 * work of one kind never waits behind another's:
 *  - STORAGE: short storage work (reads that miss the cache, write
 *    preparation, scans, DDL steps); `workers` threads.
 *  - HOST: host code that may block for long (queue handlers);
 *    `host_workers` threads. A handler that blocks for minutes delays
 *    other host work only, never a commit or a read.
 */
typedef enum troupe_lane {
    TROUPE_LANE_STORAGE = 0,
    TROUPE_LANE_HOST = 1
} troupe_lane;

/*
 * Byte budgets: memory that input from outside can make the runtime hold
 * is bounded in bytes, not only in messages; past a budget the offending
 * send or submit fails with EFULL and nothing is queued.
 */
#define TROUPE_DEFAULT_MAILBOX_BYTES (UINT64_C(64) << 20)
#define TROUPE_DEFAULT_NET_BYTES (UINT64_C(256) << 20)
#define TROUPE_DEFAULT_WORK_JOBS 65536u
#define TROUPE_DEFAULT_WORK_BYTES (UINT64_C(256) << 20)

typedef struct troupe_runtime_opts {
    struct uv_loop_s *loop; /* embedded mode: the host's loop (scheduler 0) */
    unsigned schedulers;    /* 0: number of online cores; at most 256 */
    unsigned workers;       /* STORAGE lane threads; 0: 4; at most 256 */
    uint32_t node_id;       /* this node's id in addresses; 0: 1 */
    unsigned host_workers;  /* HOST lane threads; 0: as many as workers;
                               at most 256 */
    /* Per mailbox: body bytes of queued user messages (not system
     * messages, replies or completions; bodies of up to 64 bytes, which
     * live in the message header's allocation, are left to the message
     * bound like headers). A message that would pass it fails with EFULL,
     * unless the mailbox holds no counted bytes (so one message larger
     * than the bound still gets through, alone). A def's own
     * mailbox_bytes overrides it. 0: TROUPE_DEFAULT_MAILBOX_BYTES
     * (64 MiB). */
    uint64_t mailbox_bytes;
    /* Runtime-wide: bytes of messages delivered from other nodes
     * (troupe_runtime_deliver, replies included; each counts its body
     * plus its header) that are still queued in mailboxes, so that many
     * actors cannot add up to unbounded memory. Past it, deliver refuses
     * with EFULL. 0: TROUPE_DEFAULT_NET_BYTES (256 MiB). */
    uint64_t net_bytes;
    /* Per lane: actor jobs (troupe_work_submit*) queued or running; one
     * more fails with EFULL. 0: TROUPE_DEFAULT_WORK_JOBS (65536). */
    uint32_t work_max_jobs;
    /* Per lane: bytes the submitters of queued or running jobs declared;
     * a job that would pass it fails with EFULL, unless the lane holds
     * no declared bytes. 0: TROUPE_DEFAULT_WORK_BYTES (256 MiB). */
    uint64_t work_max_bytes;
    /* Where the runtime's log records go, and the modules' that run on it
     * (troupe_runtime_logger); copied. Zeroed: stderr at WARN (log.h). */
    troupe_logger logger;
} troupe_runtime_opts;

/*
 * Creates and starts a runtime. opts may be NULL (standalone, defaults).
 * Errors: EINVAL (out-of-range option), ENOMEM, ESYS (thread or loop setup).
 * Any thread; blocks only while threads start.
 */
troupe_err
troupe_runtime_create(troupe_runtime **out, const troupe_runtime_opts *opts);

typedef void (*troupe_shutdown_cb)(troupe_runtime *rt, void *arg);

/*
 * Graceful shutdown, asynchronous: from now on spawns and sends from
 * outside fail with ECLOSED; each actor drains what is queued and stops,
 * children before their supervisor and, on each scheduler, in reverse spawn
 * order; then the worker pool winds down: actor jobs not yet started are
 * cancelled (their drop runs instead: every actor is gone by then, so
 * their completions could only be dropped), jobs already running and
 * troupe_runtime_work jobs finish; every handle is closed. So shutdown
 * waits for at most the jobs running at that moment, not for a backlog.
 * Then cb runs once, on scheduler 0 (the host's loop in embedded mode).
 * Returns OK and fires cb exactly once, or returns ESTATE (already shutting
 * down) and never fires it. Any thread.
 */
troupe_err
troupe_runtime_shutdown(troupe_runtime *rt, troupe_shutdown_cb cb, void *arg);

/*
 * Standalone mode only, blocking: shuts down (if not already) and waits
 * until shutdown completes. On a scheduler thread (an actor's handler, a
 * completion callback) it would wait for itself: EDEADLK, and nothing is
 * started. ESTATE in embedded mode.
 */
troupe_err
troupe_runtime_shutdown_wait(troupe_runtime *rt);

/*
 * Frees the runtime after its shutdown callback has fired (or after
 * shutdown_wait returned). Joins its threads. NULL is a no-op.
 * Calling it earlier is a programming error and aborts.
 */
void
troupe_runtime_destroy(troupe_runtime *rt);

unsigned
troupe_runtime_schedulers(const troupe_runtime *rt);
uint32_t
troupe_runtime_node_id(const troupe_runtime *rt);
/* The runtime's logger (a copy of opts.logger), for the modules that run
 * on it: valid until troupe_runtime_destroy. NULL rt: the default logger.
 * Any thread. */
const troupe_logger *
troupe_runtime_logger(const troupe_runtime *rt);

/* The loop of scheduler i (i < schedulers), for adapters that need to put
 * handles on it; touch it only from that scheduler's thread. */
struct uv_loop_s *
troupe_runtime_loop(troupe_runtime *rt, unsigned i);

/*
 * Sends from outside any actor (a host thread, a storage or transport
 * thread): `from` is TROUPE_ADDR_NONE unless the message already names one.
 * Consumes *m (NULLed) on success and failure. Errors: EINVAL, EDEAD (no
 * such actor), EFULL (mailbox at its message or byte bound; system
 * messages are exempt), ECLOSED (shutting down), EUNREACHABLE (no route
 * to the node).
 * Completions are exempt from ECLOSED and from the mailbox bounds: a reply
 * (TROUPE_MSG_REPLY with the ask's corr, e.g. answered from a storage or
 * worker thread) and a message with ptr set (an adapter's completion) still
 * reach live actors while shutdown drains them.
 * Any thread; never blocks.
 */
troupe_err
troupe_runtime_send(troupe_runtime *rt, troupe_addr to, troupe_msg **m);

/*
 * Answers an ask from any thread, given the asker's address and the ask's
 * correlation id: for work an actor handed off (a worker, the storage
 * writer) that finishes elsewhere. The reply carries err and takes over
 * *body (may be NULL for an empty body; NULLed); its `from` names this
 * node (slot 0), so a remote asker can match it against the node it
 * asked. corr 0 (a plain send) is
 * ignored and returns OK: nobody waits. Failures are returned but leave
 * the asker to its deadline. Errors as troupe_runtime_send, and EINVAL.
 */
troupe_err
troupe_runtime_reply(troupe_runtime *rt, troupe_addr to, uint64_t corr,
                     troupe_err err, troupe_body **body);

/* Callback form of ask for host code. Exactly once per successful call. */
typedef void (*troupe_reply_cb)(troupe_runtime *rt, troupe_err err,
                                troupe_msg *reply, void *arg);

/*
 * Asks `to` and calls cb exactly once with the reply (err OK, or the error
 * the replier set) or with err ETIMEDOUT and reply NULL after timeout_ms,
 * or ECLOSED at shutdown. cb runs on scheduler 0 (the host's loop in
 * embedded mode) and borrows `reply`. Consumes *m. A call that returns an
 * error never fires cb. timeout_ms must be > 0. Any thread.
 */
troupe_err
troupe_runtime_ask(troupe_runtime *rt, troupe_addr to, troupe_msg **m,
                   uint32_t timeout_ms, troupe_reply_cb cb, void *arg);

/*
 * Named registry. Names are 1..255 bytes. register fails with EEXIST when
 * the name is taken by a live actor. An actor's names are removed when it
 * stops. Any thread.
 */
troupe_err
troupe_registry_add(troupe_runtime *rt, const char *name, troupe_addr a);
troupe_err
troupe_registry_remove(troupe_runtime *rt, const char *name);
/* ENOENT when no live actor holds the name. */
troupe_err
troupe_registry_lookup(troupe_runtime *rt, const char *name, troupe_addr *a);

/*
 * The remote hook: protocols/ installs it so that a send to an address whose
 * node is not this node is handed to the transport. `send` consumes *m on
 * success and failure and must not block; it returns EUNREACHABLE when it
 * has no route to the node. Installed before use, once; NULL ops removes it
 * (the caller then guarantees no send is in flight).
 */
typedef struct troupe_remote_ops {
    troupe_err (*send)(void *ctx, troupe_msg **m);
} troupe_remote_ops;

void
troupe_runtime_set_remote(troupe_runtime *rt, const troupe_remote_ops *ops,
                          void *ctx);

/*
 * Delivers a message that arrived from another node, to a local actor.
 * `m->to` names the target. Consumes *m. Any thread; never blocks.
 *
 * Only the REPLY flag is taken from the wire: a peer cannot make a system
 * message, set ptr (EINVAL) or bypass a mailbox bound. The message is
 * counted in the runtime-wide network budget (opts.net_bytes) until it
 * leaves the mailbox.
 *
 * A reply completes the matching ask only if that ask was sent to the
 * node named by m->from.node (the transport sets it to the node of the
 * link the message came on) and names the asker and its correlation id;
 * anything else is dropped when the asker's turn looks at it.
 *
 * Any other message must have a kind its receiver's definition declares
 * remote (troupe_actor_def.remote_kinds). Refused, with the error
 * returned: EINVAL (kind local-only, or ptr set, or m->to names another
 * node), EDEAD (no such actor or stale generation), EFULL (mailbox at its
 * message or byte bound, or the network budget spent), ECLOSED. When the
 * refused message is an ask from another node (corr != 0, from not NONE),
 * the runtime answers it at once with an empty error reply carrying that
 * error, sent back through the remote hook, so the asker does not wait for
 * its deadline. One reply per refused ask, never more, and the transport's
 * bounded queues may refuse it; refusals, replies and lost replies are
 * counted (troupe_runtime_stats_get).
 */
troupe_err
troupe_runtime_deliver(troupe_runtime *rt, troupe_msg **m);

/*
 * Runs fn(arg) on the STORAGE lane of the worker pool, then done(arg, rt)
 * on scheduler 0. For adapters that are not actors; actors use
 * troupe_work_submit. done fires exactly once (also at shutdown, after fn
 * ran: these jobs are never cancelled). done may be NULL: then fn
 * finishes the job (it may free arg) and nothing runs on scheduler 0; such
 * a job, too, runs at shutdown once submitted. Not refused by the lane's job
 * bound: these are completions of host calls in flight, bounded by the
 * host. Errors: EINVAL, ENOMEM, ECLOSED (the pool has stopped). Any
 * thread.
 */
troupe_err
troupe_runtime_work(troupe_runtime *rt, void (*fn)(void *arg),
                    void (*done)(void *arg, troupe_runtime *rt), void *arg);

/*
 * The same on `lane`, declaring `bytes`: what the job holds while it is
 * queued or running (counted against the lane's byte budget until fn
 * returns). Also EFULL (the lane's byte budget is spent) and EINVAL (no
 * such lane).
 */
troupe_err
troupe_runtime_work_in(troupe_runtime *rt, troupe_lane lane, uint64_t bytes,
                       void (*fn)(void *arg),
                       void (*done)(void *arg, troupe_runtime *rt), void *arg);

/* Counters since create; relaxed reads, for monitoring and tests. */
typedef struct troupe_runtime_stats {
    uint64_t remote_refused_kind; /* local-only kind from another node */
    uint64_t remote_refused_dead; /* no such actor / stale generation */
    uint64_t remote_refused_full; /* mailbox bound or network budget */
    uint64_t error_replies;       /* error replies to refused remote asks */
    uint64_t error_replies_lost;  /* ... that the transport refused */
    uint64_t mailbox_full;        /* EFULL of any send (local or remote) */
    uint64_t net_bytes;           /* network bytes queued in mailboxes now */
    uint64_t work_refused;        /* jobs refused with EFULL */
    uint64_t work_cancelled;      /* jobs cancelled at shutdown */
} troupe_runtime_stats;

/* Fills *out (zeroes when rt is NULL). Any thread. */
void
troupe_runtime_stats_get(const troupe_runtime *rt, troupe_runtime_stats *out);

/* One scheduler's figures, from a walk over its actors on its thread. */
typedef struct troupe_sched_stats {
    uint32_t actors;     /* live actors on the scheduler */
    uint64_t queued;     /* messages in their mailboxes or in a turn now */
    uint32_t max_queued; /* the deepest of those mailboxes */
} troupe_sched_stats;

/*
 * Fills *out for scheduler i (i < troupe_runtime_schedulers): the walk is
 * posted to that scheduler's thread and this call waits for it, so it
 * takes as long as the turn running there. Errors: EINVAL (NULL, i out of
 * range), EDEADLK (called on a troupe scheduler's thread or inside a
 * troupe callback, which could wait for itself; nothing is started),
 * ECLOSED (the scheduler has closed), ENOMEM. Blocks: never call it on a
 * loop thread (a host's loop in embedded mode included).
 */
troupe_err
troupe_runtime_sched_stats_wait(troupe_runtime *rt, unsigned i,
                                troupe_sched_stats *out);

/*
 * Runs fn(arg, rt) once on scheduler 0 (the host's loop in embedded mode),
 * never inside this call: for adapters that finish on another thread, or
 * on scheduler 0 itself, and must not call back from inside the call.
 * Calls posted by one thread run in post order. On OK fn runs exactly once
 * (also at shutdown: calls posted before scheduler 0 closed still run);
 * on error never. Errors: EINVAL (NULL rt or fn), ENOMEM, ECLOSED
 * (scheduler 0 has closed). Any thread; never blocks.
 */
troupe_err
troupe_runtime_post(troupe_runtime *rt,
                    void (*fn)(void *arg, troupe_runtime *rt), void *arg);

#endif
