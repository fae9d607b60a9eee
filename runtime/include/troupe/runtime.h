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
#include <uv.h>

#include "troupe/err.h"
#include "troupe/msg.h"

typedef struct troupe_runtime troupe_runtime;

typedef struct troupe_runtime_opts {
    uv_loop_t *loop;     /* embedded mode: the host's loop (scheduler 0) */
    unsigned schedulers; /* 0: number of online cores; at most 256 */
    unsigned workers;    /* worker pool threads; 0: 4; at most 256 */
    uint32_t node_id;    /* this node's id in addresses; 0: 1 */
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
 * order; the worker pool finishes submitted work; every handle is closed.
 * Then cb runs once, on scheduler 0 (the host's loop in embedded mode).
 * Returns OK and fires cb exactly once, or returns ESTATE (already shutting
 * down) and never fires it. Any thread.
 */
troupe_err
troupe_runtime_shutdown(troupe_runtime *rt, troupe_shutdown_cb cb, void *arg);

/*
 * Standalone mode only, blocking: shuts down (if not already) and waits
 * until shutdown completes. Never call it on a loop thread.
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
/* The loop of scheduler i (i < schedulers), for adapters that need to put
 * handles on it; touch it only from that scheduler's thread. */
uv_loop_t *
troupe_runtime_loop(troupe_runtime *rt, unsigned i);

/*
 * Sends from outside any actor (a host thread, a storage or transport
 * thread): `from` is TROUPE_ADDR_NONE unless the message already names one.
 * Consumes *m (NULLed) on success and failure. Errors: EINVAL, EDEAD (no
 * such actor), EFULL (mailbox at capacity; system messages are exempt),
 * ECLOSED (shutting down), EUNREACHABLE (no route to the node).
 * Completions are exempt from ECLOSED and from the mailbox bound: a reply
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
 * *body (may be NULL for an empty body; NULLed). corr 0 (a plain send) is
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
 * `m->to` names the target; a message with TROUPE_MSG_REPLY completes the
 * matching ask. Consumes *m. Same errors as troupe_runtime_send.
 */
troupe_err
troupe_runtime_deliver(troupe_runtime *rt, troupe_msg **m);

/*
 * Runs fn(arg) on the worker pool, then done(arg, rt) on scheduler 0. For
 * adapters that are not actors; actors use troupe_work_submit. done fires
 * exactly once (also at shutdown, after fn ran). Any thread.
 */
troupe_err
troupe_runtime_work(troupe_runtime *rt, void (*fn)(void *arg),
                    void (*done)(void *arg, troupe_runtime *rt), void *arg);

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
