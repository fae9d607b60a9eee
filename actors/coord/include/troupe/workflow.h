/*
 * Workflows (docs/coordinator.md, "Workflows"): a global transaction
 * whose flow is a function of the application's, registered by name, run
 * by the coordinator and replayed from the top on every run, with each
 * step memoized in the transaction's document.
 *
 * A run is a dispatch task (troupe/dispatch.h) of kind
 * TROUPE_TASK_WORKFLOW to the target the workflow is named after; its
 * body holds the input and the records so far. The function calls
 * troupe_wf_step for each step in order: a step whose record says done
 * returns its stored result and runs nothing; a registered step runs its
 * action now, inline; a new step is registered (its compensation stored)
 * and the call returns TROUPE_EAGAIN: the function returns at once and
 * runs again once that registration is committed. So a compensation is
 * always committed before its action runs, nothing ever waits on a
 * commit, and a crash at any point replays to the same place without
 * running a succeeded step again (an action interrupted before its
 * result was committed runs again: the barrier, troupe/barrier.h, makes
 * it once, under mode "workflow", the gid, the step's branch id, op
 * "action").
 *
 * The function returns SUCCESS (the workflow succeeds) or FAILURE (every
 * registered compensation runs, in reverse: DTM's rollback); anything
 * else runs it again after the coordinator's backoff, as does a run that
 * returns nothing in time (the target's timeout) or a name no target has:
 * a workflow never rolls back for want of an answer. After a call
 * returned TROUPE_EAGAIN, what the function returns is ignored.
 *
 * Determinism: a run must take the recorded path. A step name that
 * differs from the record at the same position stops the workflow as
 * diverged (held, its reason naming the position and both names: it
 * neither succeeds nor compensates, and an operator's retry or the next
 * open runs it again, after a fix). Version markers (troupe_wf_version)
 * let code change while instances are in flight.
 *
 * Threads: the function runs on the runtime's HOST lane (it may block
 * there; an action doing storage work should use the blocking calls of
 * troupe/txn.h, which are allowed on that lane). troupe_wf_* calls take
 * the wf of the run they are given and are valid only during it.
 */
#ifndef TROUPE_WORKFLOW_H
#define TROUPE_WORKFLOW_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/coordinator.h"
#include "troupe/dispatch.h"

typedef struct troupe_wf troupe_wf;

/* A workflow's function: input[0..len) as submitted (borrowed for the
 * run). */
typedef troupe_outcome (*troupe_wf_fn)(troupe_wf *wf, const uint8_t *input,
                                       size_t len, void *arg);

/* A step's action: runs while the step is registered and not done, with
 * the step's branch id ("01"...; the barrier's); its result (SUCCESS) or
 * its failure's detail (FAILURE) set with troupe_wf_result_set. SUCCESS
 * and FAILURE are recorded; ONGOING or UNKNOWN (anything else) ends the
 * run, which runs again after the backoff and calls the action again. */
typedef troupe_outcome (*troupe_wf_action)(troupe_wf *wf, const char *branch_id,
                                           void *arg);

typedef struct troupe_workflow troupe_workflow;

typedef struct troupe_workflow_def {
    const char *name; /* the target's: 1..TROUPE_TARGET_NAME_MAX bytes */
    troupe_wf_fn fn;
    void *arg;           /* must outlive troupe_workflow_destroy */
    uint32_t credit;     /* runs at once: 0: 64 */
    uint32_t timeout_ms; /* of a run: 0: 30 s */
} troupe_workflow_def;

/*
 * Registers the workflow function d->fn as a callback target named
 * d->name on rt (troupe_target_create's rules and errors: EINVAL, EEXIST,
 * ECLOSED, ENOMEM). Submit instances with troupe_workflow_submit. Any
 * thread; never blocks.
 */
troupe_err
troupe_workflow_create(troupe_runtime *rt, const troupe_workflow_def *d,
                       troupe_workflow **out);

/* Stops the target (its runs in flight finish or time out; a run refused
 * meanwhile is retried by the coordinator once a target of that name is
 * back). Errors as troupe_target_stop_wait's. Blocks. */
troupe_err
troupe_workflow_stop_wait(troupe_workflow *w);

/* Frees a stopped workflow, once no run is inside its function (one
 * still going past its deadline is waited for). NULL: no-op. */
void
troupe_workflow_destroy(troupe_workflow *w);

/*
 * Submits workflow instance gid of the workflow named name (a dispatch
 * target of the coordinator's runtime: a troupe_workflow, or a host's
 * pull target serving TROUPE_TASK_WORKFLOW) with input[0..len) (at most
 * TROUPE_GTX_PAYLOAD_MAX bytes, copied), and runs it. OK once it is
 * committed, or when gid exists already (nothing twice, as any submit).
 * Errors: EINVAL (gid, name, input), ENOENT (no target of that name),
 * ECLOSED, the commit's, ENOMEM. Returns at once; cb as the coordinator's
 * asynchronous calls (troupe/coordinator.h).
 */
troupe_err
troupe_workflow_submit(troupe_coord *c, const char *gid, size_t gid_len,
                       const char *name, const void *input, size_t len,
                       troupe_coord_cb cb, void *arg);
troupe_err
troupe_workflow_submit_wait(troupe_coord *c, const char *gid, size_t gid_len,
                            const char *name, const void *input, size_t len);

/* An awakeable's id: "gid/branch-id", at most this many bytes. */
#define TROUPE_AWAKEABLE_ID_MAX (TROUPE_GID_MAX + 5)

/*
 * Resolves (or rejects) the awakeable id with payload[0..len) (at most
 * TROUPE_GTX_PAYLOAD_MAX bytes, copied): committed on the gid's shard,
 * then the workflow runs again and troupe_wf_await returns it. Resolving
 * again with the same verdict and payload is OK and changes nothing.
 * Errors: EINVAL (an id that is not one, a payload too long), ENOENT (no
 * such workflow, or no awakeable at that position), ECONFLICT (resolved
 * otherwise already, or the workflow has ended), ECLOSED, ENOMEM.
 * Returns at once; cb as above.
 */
troupe_err
troupe_awakeable_resolve(troupe_coord *c, const char *id, size_t id_len,
                         const void *payload, size_t len, troupe_coord_cb cb,
                         void *arg);
troupe_err
troupe_awakeable_reject(troupe_coord *c, const char *id, size_t id_len,
                        const void *reason, size_t len, troupe_coord_cb cb,
                        void *arg);
troupe_err
troupe_awakeable_resolve_wait(troupe_coord *c, const char *id, size_t id_len,
                              const void *payload, size_t len);
troupe_err
troupe_awakeable_reject_wait(troupe_coord *c, const char *id, size_t id_len,
                             const void *reason, size_t len);

/* ---- inside a run ---- */

/* The instance's gid, NUL-terminated (*len, which may be NULL, its
 * bytes), valid for the run. */
const char *
troupe_wf_gid(const troupe_wf *wf, size_t *len);

/*
 * Step `name` (1..TROUPE_WF_NAME_MAX bytes) at the run's next position:
 * OK: it succeeded (now or in an earlier run); *result and *len (each may
 * be NULL) its result, valid for the run. EFAILED: its action said
 * FAILURE (now or earlier); *result its detail; the function may return
 * FAILURE to compensate, or go on. EAGAIN: return now (the step is being
 * registered, its action asked to be retried, or the run diverged).
 * EINVAL: a bad name or compensation (the run is retried later, as
 * ONGOING: fix the code). compensate (NULL: none) is the branch call that
 * undoes the step, a dispatch target of the coordinator's runtime or an
 * actor target (troupe/branch.h), stored with the registration.
 */
troupe_err
troupe_wf_step(troupe_wf *wf, const char *name,
               const troupe_gtx_call *compensate, troupe_wf_action action,
               void *arg, const uint8_t **result, size_t *len);

/* Inside an action: its result (copied; at most TROUPE_GTX_PAYLOAD_MAX
 * bytes: ETOOBIG). A second call replaces the first. EINVAL outside an
 * action. */
troupe_err
troupe_wf_result_set(troupe_wf *wf, const void *data, size_t len);

/* The reason a run that returns FAILURE gives (stored as the workflow's
 * rollback reason; "workflow: FAILURE" without one): 1..256 bytes of
 * UTF-8 without control characters (troupe_gtx_abort_reason_valid),
 * copied. EINVAL for another, or inside an action. */
troupe_err
troupe_wf_reason_set(troupe_wf *wf, const char *reason);

/*
 * Awakeable `name` at the run's next position: OK once it is registered,
 * with its id in id (NUL-terminated): hand it to whoever resolves it
 * (typically from a step, so that it is sent once), then wait for it
 * with troupe_wf_await. EAGAIN: return now (it is being registered).
 */
troupe_err
troupe_wf_awakeable(troupe_wf *wf, const char *name,
                    char id[TROUPE_AWAKEABLE_ID_MAX + 1]);

/*
 * The resolution of awakeable id (one of this instance's): OK resolved,
 * EFAILED rejected, with its payload in *payload, *len (each may be NULL;
 * valid for the run). EAGAIN: not yet: return now (the workflow is held
 * until it is resolved). ENOENT: not an awakeable of this instance.
 * Takes no position.
 */
troupe_err
troupe_wf_await(troupe_wf *wf, const char *id, const uint8_t **payload,
                size_t *len);

/* The version an instance that predates a marker gets. */
#define TROUPE_WF_VERSION_DEFAULT (-1)

/*
 * A version marker `change` at the run's next position, for code changed
 * while instances are in flight: an instance that recorded it gets the
 * recorded version; one that reaches it for the first time records and
 * gets max (with no commit of its own: it goes with the next
 * registration); one whose record at this position is something else
 * predates the change and gets TROUPE_WF_VERSION_DEFAULT, taking no
 * position. A version outside [min, max] (min <= max; the default
 * counts) diverges: EAGAIN, return now. EINVAL: a bad change name, min
 * over max.
 */
troupe_err
troupe_wf_version(troupe_wf *wf, const char *change, int32_t min, int32_t max,
                  int32_t *version);

#endif
