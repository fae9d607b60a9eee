/*
 * The modes' rules as pure functions of a global transaction's document
 * and the time (troupe/internal/gtx.h: troupe__gtx_plan, _apply): which
 * call runs next, what an outcome does, the backoff. The shard that owns
 * the transaction persists the document after each and dispatches what
 * plan picked; everything here is tested without a runtime.
 */
#include <stdio.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/internal/gtx.h"

int64_t
troupe__gtx_backoff(const tc_opts *o, uint32_t n)
{
    int64_t lo = o->retry_min_ms, hi = o->retry_max_ms;
    int64_t b = lo;
    for (uint32_t i = 1; i < n && b < hi; i++)
        b *= 2;
    return b < hi ? b : hi;
}

/* The op a status drives forward (SUBMITTED) or back (ABORTING), -1 for
 * none: saga actions then compensations, tcc confirms then cancels (a
 * try is the application's, never the coordinator's), message steps
 * (never compensated), workflow compensations (a workflow goes forward by
 * its runs, planned apart), xa commits ("action") then rollbacks (the
 * prepare is the application's, under the branch's xid). */
static int
phase_op(troupe_gtx_mode m, tc_status s)
{
    bool fwd = s == TC_SUBMITTED, back = s == TC_ABORTING;
    switch (m) {
    case TROUPE_MODE_SAGA:
        return fwd ? 0 : back ? 1 : -1;
    case TROUPE_MODE_TCC:
        return fwd ? 1 : back ? 2 : -1;
    case TROUPE_MODE_MSG:
        return fwd ? 0 : -1;
    case TROUPE_MODE_WORKFLOW:
        return back ? 1 : -1;
    case TROUPE_MODE_XA:
        return fwd ? 0 : back ? 1 : -1;
    default:
        return -1;
    }
}

static void
finish(tc_gtx *g, tc_status s, int64_t now)
{
    g->status = s;
    g->finished_ms = now > 0 ? now : 1;
    g->due_ms = 0;
}

/* Aborting, with a reason (kept when one is set already; none when out
 * of memory: the abort itself must not fail). */
static void
start_abort(tc_gtx *g, const char *why)
{
    g->status = TC_ABORTING;
    g->due_ms = 0;
    if (g->reason != NULL)
        return;
    size_t len = strlen(why) + 1;
    if ((g->reason = troupe_malloc(len)) != NULL)
        memcpy(g->reason, why, len);
}

/* The step whose op `op` is next in the phase: the first not done going
 * forward, the last going back; NULL when every one is done. */
static tc_call *
next_call(tc_gtx *g, unsigned op, bool back, uint32_t *step)
{
    for (uint32_t k = 0; k < g->n_steps; k++) {
        uint32_t i = back ? g->n_steps - 1 - k : k;
        tc_call *c = &g->steps[i].call[op];
        if (c->target != NULL && c->state != TC_DONE) {
            *step = i;
            return c;
        }
    }
    return NULL;
}

/* Runs c now if it is due; otherwise leaves g->due_ms as the time to
 * look again (0 while c is in flight). */
static void
run_if_due(tc_gtx *g, tc_call *c, tc_ref r, int64_t now, tc_plan *p)
{
    if (c->state == TC_DOING) {
        g->due_ms = 0;
        return;
    }
    if (now < g->due_ms)
        return;
    c->state = TC_DOING;
    c->attempts++;
    g->due_ms = 0;
    p->run[p->n_run++] = r;
}

bool
troupe__gtx_order_valid(const uint64_t *after, uint32_t n)
{
    if (n > 64)
        return false;
    uint64_t all = n == 64 ? UINT64_MAX : ((uint64_t)1 << n) - 1;
    for (uint32_t i = 0; i < n; i++)
        if ((after[i] & ~all) != 0 || (after[i] >> i & 1) != 0)
            return false;
    /* Kahn's: take a step whose dependencies are all taken until none is
     * left; one left over lies on a cycle */
    uint64_t taken = 0;
    for (bool moved = true; moved;) {
        moved = false;
        for (uint32_t i = 0; i < n; i++)
            if ((taken >> i & 1) == 0 && (after[i] & ~taken) == 0) {
                taken |= (uint64_t)1 << i;
                moved = true;
            }
    }
    return taken == all;
}

/* A step's action does not count (absent) or succeeded. */
static bool
action_done(const tc_gtx *g, uint32_t i)
{
    const tc_call *a = &g->steps[i].call[0];
    return a->target == NULL || a->state == TC_DONE;
}

/* Going back, step j no longer stands in the way of the compensations of
 * what it waits for: its action is not in flight and its compensation,
 * if it has one, is done. */
static bool
settled_back(const tc_gtx *g, uint32_t j)
{
    const tc_call *a = &g->steps[j].call[0], *c = &g->steps[j].call[1];
    return a->state != TC_DOING && (c->target == NULL || c->state == TC_DONE);
}

/* Whether step i's call of the phase may run: forward, every action it
 * waits for succeeded; back, its own action settled and every step that
 * waits for it settled back. */
static bool
ready(const tc_gtx *g, uint32_t i, bool back)
{
    if (!back) {
        for (uint32_t j = 0; j < g->n_steps; j++)
            if ((g->after[i] >> j & 1) != 0 && !action_done(g, j))
                return false;
        return true;
    }
    if (g->steps[i].call[0].state == TC_DOING)
        return false;
    for (uint32_t j = 0; j < g->n_steps; j++)
        if ((g->after[j] >> i & 1) != 0 && !settled_back(g, j))
            return false;
    return true;
}

/* A concurrent saga's phase: every ready call runs, those never run at
 * once, those to retry once g->due_ms has come; the phase ends when
 * every call of op is done. */
static void
plan_concurrent(tc_gtx *g, unsigned op, bool back, int64_t now, tc_plan *p)
{
    bool done = true, retry_waits = false;
    for (uint32_t k = 0; k < g->n_steps; k++) {
        uint32_t i = back ? g->n_steps - 1 - k : k;
        tc_call *c = &g->steps[i].call[op];
        if (c->target == NULL || c->state == TC_DONE)
            continue;
        done = false;
        if (c->state == TC_DOING || !ready(g, i, back))
            continue;
        if (c->attempts > 0 && now < g->due_ms) {
            retry_waits = true;
            continue;
        }
        c->state = TC_DOING;
        c->attempts++;
        p->run[p->n_run++] = (tc_ref){i, op};
    }
    if (done) {
        finish(g, back ? TC_FAILED : TC_SUCCEED, now);
        p->changed = true;
        return;
    }
    if (!retry_waits)
        g->due_ms = 0;
}

void
troupe__gtx_plan(tc_gtx *g, int64_t now, tc_plan *p)
{
    memset(p, 0, sizeof(*p));
    if (troupe__gtx_final(g))
        return;
    if (g->mode == TROUPE_MODE_SAGA && g->status == TC_SUBMITTED &&
        g->opts.timeout_to_fail_ms > 0 &&
        now >= g->created_ms + g->opts.timeout_to_fail_ms) {
        start_abort(g, "submitted for longer than its timeout-to-fail");
        p->changed = true;
    }
    if (g->status == TC_PREPARED &&
        (g->mode == TROUPE_MODE_TCC || g->mode == TROUPE_MODE_XA) &&
        g->opts.timeout_to_fail_ms > 0) {
        int64_t end = g->created_ms + g->opts.timeout_to_fail_ms;
        if (now >= end) { /* never submitted: cancel what it registered */
            start_abort(g, "prepared for longer than its timeout-to-fail");
            p->changed = true;
        } else {
            g->due_ms = end;
        }
    }
    if (g->status == TC_PREPARED) {
        if (g->mode == TROUPE_MODE_MSG)
            run_if_due(g, &g->query, (tc_ref){TC_QUERY, 0}, now, p);
        return; /* a tcc waits for its submit, abort or timeout */
    }
    if (g->mode == TROUPE_MODE_WORKFLOW) {
        /* forward: its function runs (unless held); back: once no run is
         * in flight (one may still execute a step), the compensations */
        if (g->query.state == TC_DOING ||
            (g->status == TC_SUBMITTED && g->hold != TC_HOLD_NONE)) {
            g->due_ms = 0;
            return;
        }
        if (g->status == TC_SUBMITTED) {
            run_if_due(g, &g->query, (tc_ref){TC_QUERY, 0}, now, p);
            return;
        }
    }
    int op = phase_op(g->mode, g->status);
    if (op < 0)
        return;
    bool back = g->status == TC_ABORTING;
    if (g->after != NULL) {
        plan_concurrent(g, (unsigned)op, back, now, p);
        return;
    }
    uint32_t step = 0;
    tc_call *c = next_call(g, (unsigned)op, back, &step);
    if (c == NULL) {
        finish(g, back ? TC_FAILED : TC_SUCCEED, now);
        p->changed = true;
        return;
    }
    run_if_due(g, c, (tc_ref){step, (unsigned)op}, now, p);
}

static tc_call *
call_of(tc_gtx *g, tc_ref r)
{
    if (r.step == TC_QUERY)
        return g->query.target != NULL ? &g->query : NULL;
    if (r.step >= g->n_steps || r.op >= TROUPE_GTX_OPS_MAX)
        return NULL;
    tc_call *c = &g->steps[r.step].call[r.op];
    return c->target != NULL ? c : NULL;
}

troupe_err
troupe__gtx_apply(tc_gtx *g, tc_ref r, troupe_outcome o, int64_t now)
{
    tc_call *c = call_of(g, r);
    if (c == NULL || o < TROUPE_OUTCOME_SUCCESS || o > TROUPE_OUTCOME_UNKNOWN)
        return TROUPE_EINVAL;
    if (c->state != TC_DOING || troupe__gtx_final(g))
        return TROUPE_ESTATE;
    c->last = (uint32_t)o;
    bool query = r.step == TC_QUERY;
    int op = phase_op(g->mode, g->status);
    if (!query && (int)r.op != op) {
        /* a call of an earlier phase answering late (an action in flight
         * when the saga began aborting): recorded, nothing else moves */
        c->state = o == TROUPE_OUTCOME_SUCCESS ? TC_DONE : TC_TODO;
        return TROUPE_OK;
    }
    if (o == TROUPE_OUTCOME_SUCCESS) {
        c->state = TC_DONE;
        if (g->after == NULL) /* concurrent: others may wait for due_ms */
            g->due_ms = 0;
        if (query)
            g->status = TC_SUBMITTED; /* the local transaction committed */
        return TROUPE_OK;
    }
    if (o == TROUPE_OUTCOME_FAILURE && query) {
        c->state = TC_REFUSED;
        finish(g, TC_FAILED, now);
        return TROUPE_OK;
    }
    if (o == TROUPE_OUTCOME_FAILURE && g->mode == TROUPE_MODE_SAGA &&
        g->status == TC_SUBMITTED) {
        c->state = TC_REFUSED;
        char why[64];
        snprintf(why, sizeof(why), "branch %02u action: FAILURE",
                 (unsigned)r.step + 1);
        start_abort(g, why);
        return TROUPE_OK;
    }
    /* UNKNOWN, ONGOING, or a FAILURE that cannot compensate: again later */
    c->state = TC_TODO;
    g->attempts++;
    if (g->mode == TROUPE_MODE_SAGA && g->status == TC_SUBMITTED &&
        g->opts.retry_limit > 0 && c->attempts >= g->opts.retry_limit) {
        char why[96];
        snprintf(why, sizeof(why),
                 "branch %02u action: no answer after %u attempts",
                 (unsigned)r.step + 1, c->attempts);
        start_abort(g, why);
        return TROUPE_OK;
    }
    int64_t due = now + troupe__gtx_backoff(&g->opts, c->attempts);
    /* concurrent calls share the due time: the earliest retry's */
    if (g->after == NULL || g->due_ms == 0 || due < g->due_ms)
        g->due_ms = due;
    return TROUPE_OK;
}

/* ---- calls from outside ---- */

troupe_err
troupe__gtx_submit(tc_gtx *g, bool *changed)
{
    *changed = false;
    if (g->status == TC_ABORTING || g->status == TC_FAILED)
        return TROUPE_ECONFLICT;
    if (g->status == TC_PREPARED) {
        g->status = TC_SUBMITTED;
        g->due_ms = 0;
        *changed = true;
    }
    return TROUPE_OK;
}

troupe_err
troupe__gtx_abort_why(tc_gtx *g, int64_t now, const char *why, bool *changed)
{
    *changed = false;
    if (troupe__gtx_final(g))
        return TROUPE_ECONFLICT;
    if (g->status == TC_ABORTING)
        return TROUPE_OK;
    if (g->mode == TROUPE_MODE_MSG) {
        /* submitted, its steps only go forward; prepared, nothing ran */
        if (g->status != TC_PREPARED)
            return TROUPE_ECONFLICT;
        start_abort(g, why);
        finish(g, TC_FAILED, now);
        *changed = true;
        return TROUPE_OK;
    }
    start_abort(g, why);
    *changed = true;
    return TROUPE_OK;
}

troupe_err
troupe__gtx_retry(tc_gtx *g, bool *changed)
{
    *changed = false;
    if (troupe__gtx_final(g))
        return TROUPE_ECONFLICT;
    *changed = g->due_ms != 0 || g->hold != TC_HOLD_NONE;
    g->due_ms = 0;
    g->hold = TC_HOLD_NONE; /* a held workflow runs again */
    return TROUPE_OK;
}

troupe_err
troupe__gtx_register_at(tc_gtx *g, troupe_gtx_mode m, tc_step *s, uint32_t want,
                        uint32_t *index, bool *changed)
{
    *changed = false;
    if ((m != TROUPE_MODE_TCC && m != TROUPE_MODE_XA) || g->mode != m)
        return TROUPE_ENOENT;
    if (g->status != TC_PREPARED)
        return TROUPE_ECONFLICT;
    if (want < g->n_steps) { /* a retried register: its branch is stored */
        *index = want;
        return TROUPE_OK;
    }
    if (want > g->n_steps)
        return TROUPE_ERANGE;
    troupe_err e = troupe__gtx_register(g, m, s, index);
    *changed = e == TROUPE_OK;
    return e;
}

troupe_err
troupe__gtx_register(tc_gtx *g, troupe_gtx_mode m, tc_step *s, uint32_t *index)
{
    if ((m != TROUPE_MODE_TCC && m != TROUPE_MODE_XA) || g->mode != m)
        return TROUPE_ENOENT;
    if (g->status != TC_PREPARED)
        return TROUPE_ECONFLICT;
    if (g->n_steps >= TROUPE_GTX_STEPS_MAX)
        return TROUPE_EINVAL;
    tc_step *ns = troupe_realloc(g->steps, (g->n_steps + 1) * sizeof(*ns));
    if (ns == NULL)
        return TROUPE_ENOMEM;
    g->steps = ns;
    ns[g->n_steps] = *s;
    memset(s, 0, sizeof(*s));
    *index = g->n_steps++;
    return TROUPE_OK;
}

troupe_err
troupe__gtx_force_stop(tc_gtx *g, int64_t now)
{
    if (troupe__gtx_final(g))
        return TROUPE_ECONFLICT;
    static const char why[] = "force-stopped";
    char *r = troupe_malloc(sizeof(why));
    if (r != NULL) {
        memcpy(r, why, sizeof(why));
        troupe_free(g->reason);
        g->reason = r;
    }
    finish(g, TC_FAILED, now);
    return TROUPE_OK;
}
