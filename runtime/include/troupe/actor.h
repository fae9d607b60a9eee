/*
 * Actors: a const definition, a private state struct, one handler per
 * message kind. An actor lives on one scheduler for life; its state and
 * every troupe_actor * call below are touched only on that scheduler's
 * thread (inside its handlers, init and stop).
 */
#ifndef TROUPE_ACTOR_H
#define TROUPE_ACTOR_H

#include <stdint.h>

#include "troupe/err.h"
#include "troupe/msg.h"
#include "troupe/runtime.h"

/* The running actor, passed to its hooks; valid only during the call. */
typedef struct troupe_actor troupe_actor;

/*
 * A handler borrows `msg` for the call. Returning anything but TROUPE_OK
 * fails the actor: it is stopped or restarted per its supervision policy
 * and its monitors receive DOWN with that error.
 */
typedef troupe_err (*troupe_handler_fn)(troupe_actor *self, void *state,
                                        const troupe_msg *msg);

typedef struct troupe_actor_def {
    const char *name; /* for logs */
    uint32_t state_size;
    /* Runs on the actor's thread before its first message; `arg` comes
     * from the spawn options. Failure stops the actor (DOWN to monitors,
     * failure to the supervisor). Also runs after each restart. */
    troupe_err (*init)(troupe_actor *self, void *state, void *arg);
    /* Runs once per incarnation when the actor stops or fails, after the
     * last message it will handle; frees what init acquired. May be NULL. */
    void (*stop)(troupe_actor *self, void *state, troupe_err reason);
    const troupe_handler_fn *handlers; /* indexed by msg->kind */
    uint32_t n_handlers;
    /* Kinds >= n_handlers or with a NULL entry. NULL: dropped, counted. */
    troupe_handler_fn on_unknown;
    uint32_t mailbox_cap; /* 0: 65536 user messages */
    uint32_t batch;       /* messages per turn; 0: 64 */
    /* Kinds that may arrive from another node: bit k (TROUPE_KIND_BIT(k))
     * admits kind k through troupe_runtime_deliver. Every other kind,
     * and every kind >= 64, is local-only: the runtime refuses it from
     * the network (an ask gets an EINVAL reply at once). Declare only
     * kinds whose handler needs nothing but the body (never ptr) and
     * survives any body. 0: nothing from the network (replies to this
     * actor's own asks always arrive). */
    uint64_t remote_kinds;
    /* Body bytes of queued user messages; 0: the runtime's default
     * (troupe_runtime_opts.mailbox_bytes). */
    uint64_t mailbox_bytes;
} troupe_actor_def;

#define TROUPE_KIND_BIT(k) (UINT64_C(1) << (k))

typedef enum troupe_restart {
    TROUPE_SUPERVISE_STOP = 0,    /* a failed actor stays stopped */
    TROUPE_SUPERVISE_RESTART = 1, /* re-run init with the same address and
                                     mailbox, up to max_restarts within
                                     restart_window_ms, then escalate */
    TROUPE_SUPERVISE_ESCALATE = 2 /* the failure fails the supervisor too */
} troupe_restart;

typedef struct troupe_spawn_opts {
    void *arg;              /* to init */
    int scheduler;          /* -1: round robin, else index; ignored when
                               `near` names a live local actor */
    troupe_addr near;       /* place on the same scheduler as this actor */
    troupe_addr supervisor; /* parent: gets child-failure notices and
                               outlives the child at shutdown */
    troupe_restart policy;
    uint32_t max_restarts;      /* 0: 3 */
    uint32_t restart_window_ms; /* 0: 5000 */
    const char *name;           /* register under this name; NULL: none */
    /* Frees `arg` once the actor is gone for good (after its last stop
     * hook; restarts reuse arg). NULL: the caller owns arg. If spawn
     * fails, the caller keeps arg and this is never called. */
    void (*arg_free)(void *arg);
} troupe_spawn_opts;

#define TROUPE_SPAWN_OPTS_INIT                                                 \
    ((troupe_spawn_opts){.scheduler = -1, .policy = TROUPE_SUPERVISE_STOP})

/*
 * Spawns an actor and returns its address at once; init runs on the
 * actor's scheduler before any message. opts may be NULL. Any thread.
 * Errors: EINVAL (bad def or option), ENOMEM, ECLOSED (shutting down),
 * EEXIST (name taken; nothing spawned).
 */
troupe_err
troupe_actor_spawn(troupe_runtime *rt, const troupe_actor_def *def,
                   const troupe_spawn_opts *opts, troupe_addr *out);

typedef void (*troupe_stop_cb)(troupe_runtime *rt, troupe_addr a, void *arg);

/*
 * Asks an actor to stop: it handles what is already queued, runs its stop
 * hook, its monitors get DOWN (err OK), then cb runs once on the actor's
 * scheduler thread. cb may be NULL. Returns EDEAD (cb never fires) when no
 * such actor lives, ESTATE when it is already stopping. Any thread.
 */
troupe_err
troupe_actor_stop(troupe_runtime *rt, troupe_addr a, troupe_stop_cb cb,
                  void *arg);

/* ---- calls for the actor's own thread (inside its hooks) ---- */

troupe_addr
troupe_self(const troupe_actor *self);
troupe_runtime *
troupe_actor_runtime(const troupe_actor *self);
struct uv_loop_s *
troupe_actor_loop(const troupe_actor *self);

/* Stops this actor after the current handler returns (queued messages are
 * still handled first). Its monitors get DOWN with err OK. */
void
troupe_self_stop(troupe_actor *self);

/*
 * Sends *m to `to` with from = self. Consumes *m on success and failure.
 * Errors as troupe_runtime_send. Never blocks; a send to an actor on the
 * same scheduler makes it runnable without a syscall.
 */
troupe_err
troupe_send(troupe_actor *self, troupe_addr to, troupe_msg **m);

/*
 * Asks `to`: the message gets a fresh correlation id and deadline. Exactly
 * one message then arrives at self with kind `reply_kind` and that corr:
 * the reply (err as the replier set it), or err ETIMEDOUT after timeout_ms,
 * or EUNREACHABLE if the transport learns the node is gone. Late replies
 * are dropped. *corr (may be NULL) receives the id. A call that returns an
 * error delivers nothing. Consumes *m.
 *
 * Correlation ids are unguessable (a keyed permutation of a counter, never
 * 0, never repeated by a runtime) and a reply is matched on the asker, the
 * id and, for a reply from another node, on that node being the one `to`
 * names: a peer cannot complete an ask it was not sent.
 */
troupe_err
troupe_ask(troupe_actor *self, troupe_addr to, troupe_msg **m,
           uint32_t timeout_ms, uint32_t reply_kind, uint64_t *corr);

/*
 * Replies to an ask (`req` is the request being handled): *reply goes to
 * req->from with req's corr. Consumes *reply. Replying to a message that
 * was not an ask (corr 0) fails with EINVAL.
 */
troupe_err
troupe_reply(troupe_actor *self, const troupe_msg *req, troupe_msg **reply);

/*
 * Replies to `req` with an empty body and `err`: the usual answer to bad
 * input. A request that was not an ask (corr 0) is ignored. Returns what
 * troupe_reply returns (OK for an ignored request).
 */
troupe_err
troupe_reply_error(troupe_actor *self, const troupe_msg *req, troupe_err err);

/*
 * Timer owned by self: a message of `kind` (corr = the timer id, body
 * empty) arrives after `after_ms`, then every `repeat_ms` if non-zero.
 * Cancelled when the actor stops or restarts. *id may be NULL.
 */
troupe_err
troupe_timer_start(troupe_actor *self, uint32_t kind, uint64_t after_ms,
                   uint64_t repeat_ms, uint64_t *id);
/* ENOENT when no such timer is armed (fired one-shot, or cancelled). */
troupe_err
troupe_timer_cancel(troupe_actor *self, uint64_t id);

/*
 * Monitors `target`: when it stops or fails, self receives a message of
 * `down_kind` with from = target and err = the reason (OK for a normal
 * stop). If target is already dead, DOWN (err EDEAD) arrives at once.
 * Local actors only (EINVAL for another node's address).
 */
troupe_err
troupe_monitor(troupe_actor *self, troupe_addr target, uint32_t down_kind);

/*
 * Runs work(arg) on the runtime's worker pool, STORAGE lane (never on a
 * loop thread); then self receives a message of `done_kind` with ptr =
 * arg. If self is gone by then, or stops before handling that message,
 * drop(arg) runs instead (on whichever thread discards the message; may
 * be NULL): exactly one of the two happens. At runtime shutdown a job not
 * yet started is cancelled: work never runs and drop(arg) runs (on
 * scheduler 0), so drop must cope with a job that never ran.
 * Errors: ENOMEM, ECLOSED, EFULL (the lane holds its job bound,
 * troupe_runtime_opts.work_max_jobs).
 */
troupe_err
troupe_work_submit(troupe_actor *self, void (*work)(void *arg), void *arg,
                   uint32_t done_kind, void (*drop)(void *arg));

/*
 * The same on `lane` (runtime.h), declaring `bytes`: what the job holds,
 * or will hold, while it is queued or running (its request, the result it
 * builds), counted against the lane's byte budget until work returns.
 * Also EFULL when that budget is spent (a job is admitted alone whatever
 * its size when the lane holds no declared bytes) and EINVAL (no such
 * lane).
 */
troupe_err
troupe_work_submit_in(troupe_actor *self, troupe_lane lane, uint64_t bytes,
                      void (*work)(void *arg), void *arg, uint32_t done_kind,
                      void (*drop)(void *arg));

#endif
