/*
 * A global transaction as the coordinator stores it: one document per
 * gid in the table `troupe.gtx` (docs/coordinator.md, "Stored format"),
 * its encoder and its decoder, which checks every field: a document read
 * from the disk that breaks a rule is ECORRUPT, never half taken. For
 * the coordinator's shards, the tests and the fuzz target.
 */
#ifndef TROUPE_INTERNAL_GTX_H
#define TROUPE_INTERNAL_GTX_H

#include <stdbool.h>
#include <stdint.h>

#include "troupe/coord.h"
#include "troupe/dispatch.h"
#include "troupe/msg.h"
#include "troupe/pack.h"

#define TROUPE_GTX_TABLE "troupe.gtx"
/* Format 1; format 2 is format 1 with the field "after" (a concurrent
 * saga's step order), written only for concurrent sagas. */
#define TROUPE_GTX_FORMAT 1
#define TROUPE_GTX_FORMAT_CONCURRENT 2
/* Format 3 is format 1 with the field "wf" (a workflow's records and
 * hold), written only for workflows. */
#define TROUPE_GTX_FORMAT_WORKFLOW 3
/* Limits of one transaction (refused at submit, ECORRUPT when read):
 * steps and payloads in troupe/coord.h. */
#define TROUPE_GTX_REASON_MAX 1024
/* The ops a step can carry: a mode's ops in troupe_gtx_op_at's order. */
#define TROUPE_GTX_OPS_MAX 3

typedef enum tc_status {
    TC_PREPARED = 1,
    TC_SUBMITTED = 2,
    TC_ABORTING = 3,
    TC_SUCCEED = 4,
    TC_FAILED = 5
} tc_status;

/* A call's progress. */
typedef enum tc_state {
    TC_TODO = 1,
    TC_DOING = 2,  /* dispatched, no outcome committed yet */
    TC_DONE = 3,   /* SUCCESS committed */
    TC_REFUSED = 4 /* FAILURE committed */
} tc_state;

/* One op of a step: where it goes and what it carries. */
typedef struct tc_call {
    char *target; /* NUL-terminated, 1..TROUPE_TARGET_NAME_MAX bytes */
    uint8_t *payload;
    size_t payload_len;
    tc_state state;
    uint32_t attempts;
    uint32_t last; /* the last outcome heard (troupe_outcome), 0: none */
} tc_call;

/* What a workflow's record is (wfrun.c): a step (call[0] its action,
 * memoized: payload the result, state TODO registered / DONE succeeded /
 * REFUSED failed; call[1] its compensation or none), an awakeable
 * (call[0]: payload the resolution, TODO pending / DONE resolved /
 * REFUSED rejected) or a version marker (call[0] DONE, `version`). */
typedef enum tc_wf_kind {
    TC_WF_STEP = 1,
    TC_WF_AWAKE = 2,
    TC_WF_VERSION = 3
} tc_wf_kind;

/* A step (saga), branch (tcc, xa), message step (msg) or workflow
 * record; its branch id is its position + 1 ("01" ...). call[i] is op
 * troupe_gtx_op_at(mode, i); a NULL target marks an op the step does not
 * have. name, kind and version are a workflow record's (NULL, 0, 0 in
 * the other modes). */
typedef struct tc_step {
    tc_call call[TROUPE_GTX_OPS_MAX];
    char *name;
    tc_wf_kind kind;
    int32_t version;
} tc_step;

/* Why a workflow is not run now although submitted: diverged (its
 * function took another path than the records: an operator's retry or
 * the next open runs it again) or awaiting an awakeable's resolution. */
typedef enum tc_hold {
    TC_HOLD_NONE = 0,
    TC_HOLD_DIVERGED = 1,
    TC_HOLD_AWAIT = 2
} tc_hold;

typedef struct tc_opts {
    int64_t timeout_to_fail_ms; /* 0: none */
    uint32_t retry_limit;       /* 0: retry for ever */
    uint32_t retry_min_ms;      /* first backoff */
    uint32_t retry_max_ms;      /* backoff cap */
    uint32_t branch_timeout_ms; /* a branch's reply timeout */
} tc_opts;

typedef struct tc_gtx {
    troupe_gtx_mode mode;
    tc_status status;
    uint32_t n_steps;
    tc_step *steps;
    char *reason; /* NULL: none */
    /* msg: the query-back target (payload empty); workflow: its run, the
     * workflow's name and input */
    tc_call query;
    uint32_t attempts;
    int64_t due_ms, created_ms, updated_ms;
    int64_t finished_ms; /* set once the status is final, else 0 */
    tc_opts opts;
    /* A concurrent saga: n_steps masks, bit j of after[i] set when step
     * i's action waits for step j's (troupe__gtx_order_valid); NULL: the
     * steps run one at a time. */
    uint64_t *after;
    tc_hold hold; /* a workflow's */
} tc_gtx;

/* The op at position i of mode m's ops (saga and workflow: action,
 * compensate; tcc: try, confirm, cancel; msg: action; xa: action,
 * rollback), NULL past them. */
const char *
troupe_gtx_op_at(troupe_gtx_mode m, unsigned i);

const char *
troupe__gtx_status_name(tc_status s);

/* g has ended: succeed or failed. */
static inline bool
troupe__gtx_final(const tc_gtx *g)
{
    return g->status == TC_SUCCEED || g->status == TC_FAILED;
}

/* Appends g's document to p (sticky errors as troupe/pack.h). */
troupe_err
troupe__gtx_encode(const tc_gtx *g, troupe_packer *p);

/*
 * Decodes a stored document into *out (owned by the caller:
 * troupe__gtx_free). Errors: ECORRUPT (anything but a well-formed document
 * of format 1 within the limits: a missing, repeated, unknown or
 * wrong-typed field, a status the mode cannot have, a final status
 * without finished_ms or the reverse, a step with no op, an empty target,
 * a state or outcome out of range), ENOTSUP (a later format), ENOMEM.
 * *out is NULL on error.
 */
troupe_err
troupe__gtx_decode(const void *doc, size_t len, tc_gtx **out);

void
troupe__gtx_free(tc_gtx *g);

/* Frees the targets and payloads of s's calls (s itself is the caller's)
 * and clears it. */
void
troupe__gtx_step_fini(tc_step *s);

/* ---- actor targets (branch.c, troupe/branch.h) ---- */

typedef struct tc_actor_target {
    bool by_name;
    char name[TROUPE_TARGET_NAME_MAX + 1]; /* by_name: the registered name */
    troupe_addr addr;                      /* otherwise: the address */
    uint32_t kind;                         /* the ask's message kind */
} tc_actor_target;

/* 0: s is no actor target (a dispatch target's name); 1: one, in *out;
 * -1: it starts as one and breaks the form (troupe/branch.h). */
int
troupe__actor_target_parse(const char *s, tc_actor_target *out);

/* The ask's body: [mode, gid, branch id, op, attempt, payload bin]. */
troupe_err
troupe__branch_msg_pack(troupe_packer *p, const char *mode, const char *gid,
                        size_t gid_len, const char *branch_id, const char *op,
                        uint32_t attempt, const void *payload, size_t len);

/* The outcome a reply carries: its body's, UNKNOWN for an error reply (a
 * timeout, an unreachable node, a refusal) or a body that is not one. */
troupe_outcome
troupe__branch_reply_outcome(const troupe_msg *m);

/* ---- the modes' rules (machine.c): what runs next, what an outcome
 * does. Pure functions of the document and the time: the shard persists
 * the document after each and dispatches what plan returned. ---- */

/* Backoff defaults (DTM's): 10 s doubling to 300 s. */
#define TROUPE_GTX_RETRY_MIN_MS 10000u
#define TROUPE_GTX_RETRY_MAX_MS 300000u
/* A prepared message's grace before it is queried back. */
#define TROUPE_MSG_GRACE_MS 10000

/* One call to dispatch: step index and op position (troupe_gtx_op_at),
 * or step UINT32_MAX for a message's query-back. */
typedef struct tc_ref {
    uint32_t step;
    unsigned op;
} tc_ref;

#define TC_QUERY UINT32_MAX

typedef struct tc_plan {
    uint32_t n_run;                   /* the calls to dispatch now */
    tc_ref run[TROUPE_GTX_STEPS_MAX]; /* run[0..n_run) */
    bool changed; /* g's status (or reason) moved: persist it */
} tc_plan;

/* after[0..n) is a step order: every bit names a step below n other
 * than its own, and no chain of them comes back to where it started. */
bool
troupe__gtx_order_valid(const uint64_t *after, uint32_t n);

/* The backoff before retry n (1 for the first): retry_min_ms doubled
 * n - 1 times, at most retry_max_ms. */
int64_t
troupe__gtx_backoff(const tc_opts *o, uint32_t n);

/*
 * What g runs next at `now`. Moves g where its rules say without running
 * anything (a saga whose actions all succeeded succeeds, one past its
 * timeout-to-fail starts aborting, an aborting one whose compensations
 * are all done fails; finished_ms is set on a final status), then picks
 * the calls due now, marks them dispatched (DOING, attempts + 1) and
 * returns them in p->run. Sequentially, one call at a time: a call still
 * dispatched blocks the ones after it (actions forward, compensations
 * and cancels in reverse). A concurrent saga (g->after) runs every
 * action whose dependencies succeeded, and going back every compensation
 * whose own action is not in flight and whose dependents' compensations
 * are done; a call never run goes at once, one to retry waits for
 * g->due_ms. g->due_ms is when to plan again when nothing is due now (0:
 * nothing to wait for).
 */
void
troupe__gtx_plan(tc_gtx *g, int64_t now, tc_plan *p);

/*
 * The outcome o of the call r, heard at `now`. SUCCESS marks it done;
 * FAILURE of a saga's action starts aborting with a reason naming the
 * branch, of a message's query fails the message (no step runs); every
 * other outcome (and FAILURE where the mode allows no compensation: a tcc
 * confirm or cancel, a saga's compensation, a message's step) puts the
 * call back to be retried after its backoff, and a saga's action past
 * the retry limit aborts. ESTATE when r is not a call in flight (a late
 * or repeated outcome): nothing changes. EINVAL for an r g does not have.
 */
troupe_err
troupe__gtx_apply(tc_gtx *g, tc_ref r, troupe_outcome o, int64_t now);

/*
 * The calls that move a transaction from outside, each a rule too.
 * submit: a prepared tcc or message is submitted (OK, *changed); one
 * submitted or succeeded already (a saga is, from its birth) is OK
 * unchanged; ECONFLICT once it aborts or failed. abort_why: a transaction
 * not final starts aborting with the reason why (copied; "aborted" for a
 * plain abort; when out of memory the abort still happens, with no
 * reason); a prepared message fails at once: it has nothing to
 * compensate; a submitted one only goes forward: ECONFLICT; aborting
 * already is OK unchanged (its reason kept); ECONFLICT on a final one.
 * retry: the call
 * waiting for its backoff is due now; ECONFLICT on a final one. register: a
 * prepared tcc or xa of mode m gains branch *s (moved in: a tcc's calls
 * at 1 and 2, an xa's at 0 and 1; *index its position); ECONFLICT when
 * not prepared, EINVAL at TROUPE_GTX_STEPS_MAX branches, ENOENT for another
 * mode, ENOMEM.
 */
troupe_err
troupe__gtx_submit(tc_gtx *g, bool *changed);
troupe_err
troupe__gtx_abort_why(tc_gtx *g, int64_t now, const char *why, bool *changed);
troupe_err
troupe__gtx_retry(tc_gtx *g, bool *changed);
troupe_err
troupe__gtx_register(tc_gtx *g, troupe_gtx_mode m, tc_step *s, uint32_t *index);
/* register with the caller's branch index: want == n_steps appends (as
 * register), want < n_steps is a repeat (OK, nothing changes, *changed
 * false; s is left to the caller), want > n_steps ERANGE; the status and
 * mode rules first, as register's. */
troupe_err
troupe__gtx_register_at(tc_gtx *g, troupe_gtx_mode m, tc_step *s, uint32_t want,
                        uint32_t *index, bool *changed);
/* force-stop: a transaction not final fails now, reason "force-stopped"
 * (replacing any); ECONFLICT on a final one. */
troupe_err
troupe__gtx_force_stop(tc_gtx *g, int64_t now);

/* ---- workflows (wfrun.c): a run replays the function over the records;
 * its reply says what it recorded and how it ended ---- */

/* How a run ended (its reply's first field). */
typedef enum tc_wf_end {
    TC_WF_SUCCEEDED = 1, /* the function returned SUCCESS */
    TC_WF_FAILED = 2,    /* it returned FAILURE: compensate */
    TC_WF_CONTINUE = 3,  /* a step waits for its registration: run again */
    TC_WF_RETRY = 4,     /* a step said ONGOING or UNKNOWN: after backoff */
    TC_WF_DIVERGED = 5,  /* the function left the recorded path */
    TC_WF_AWAIT = 6      /* it waits for an awakeable not resolved yet */
} tc_wf_end;

/* The body of a run's task: [input bin, [[kind, name, state, result bin,
 * version int], ...]] (the records, in order). */
troupe_err
troupe__gtx_wf_task_body(const tc_gtx *g, troupe_packer *p);

/*
 * A run's outcome o with its reply body, heard at `now`. SUCCESS with a
 * well-formed reply applies what it recorded (new records at the end,
 * the verdicts of registered steps) and its end: succeed; FAILURE starts
 * aborting (every registered compensation runs in reverse); CONTINUE runs
 * again now; RETRY after the backoff of the step retried; DIVERGED holds
 * the workflow with the reason saying where; AWAIT (with the awaited
 * awakeable's position) holds it until that awakeable is resolved (runs
 * again at once when it is already). Any
 * other outcome, or a reply that breaks its format or contradicts the
 * records (nothing of it is applied), runs again after the backoff:
 * never a rollback. ESTATE when the run is not in flight or g is not a
 * submitted workflow: nothing changes.
 */
troupe_err
troupe__gtx_wf_apply(tc_gtx *g, troupe_outcome o, const void *body, size_t len,
                     int64_t now);

/* Resolves awakeable `pos` of g (ok: with payload; else rejected).
 * The same resolution again (verdict and payload) is OK unchanged.
 * ENOENT: no awakeable there; ECONFLICT: resolved otherwise already, or
 * g final; EINVAL: a payload too long; ENOMEM. *changed when g moved. */
troupe_err
troupe__gtx_wf_resolve(tc_gtx *g, uint32_t pos, bool ok, const void *payload,
                       size_t len, bool *changed);

#endif
