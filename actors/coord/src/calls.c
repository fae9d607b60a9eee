/*
 * The coordinator's calls that hand work to a transaction's shard
 * (troupe/coordinator.h, troupe/workflow.h): the submits of every mode,
 * the operator calls and the second phases, an awakeable's resolution,
 * each asynchronous with its blocking twin. The shard (shard.c) applies
 * them; coord.c opens and stops; read.c reads.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"
#include "troupe/actor.h"
#include "troupe/alloc.h"
#include "troupe/internal/dispatch.h"
#include "troupe/internal/runtime.h"
#include "troupe/workflow.h"
#include "troupe/xa.h"

/* ---- submit ---- */

static bool
call_valid(troupe_runtime *rt, const troupe_gtx_call *k, bool optional,
           troupe_err *e)
{
    if (k->target == NULL) {
        if (!optional)
            *e = troupe__errf(TROUPE_EINVAL, "gtx: a step without its call");
        return optional;
    }
    size_t n = strlen(k->target);
    if (n == 0 || n > TROUPE_TARGET_NAME_MAX ||
        (k->payload == NULL && k->payload_len > 0) ||
        k->payload_len > TROUPE_GTX_PAYLOAD_MAX) {
        *e = troupe__errf(TROUPE_EINVAL,
                          "gtx: a target name is 1..%d bytes, a payload at "
                          "most %u bytes",
                          TROUPE_TARGET_NAME_MAX, TROUPE_GTX_PAYLOAD_MAX);
        return false;
    }
    tc_actor_target at;
    int actor = troupe__actor_target_parse(k->target, &at);
    if (actor < 0) {
        *e = troupe__errf(TROUPE_EINVAL,
                          "gtx: %s: an actor target is actor:NAME#KIND or "
                          "actor:@NODE.SLOT.GEN#KIND, KIND 0..63",
                          k->target);
        return false;
    }
    troupe_addr a;
    if (actor > 0 && at.by_name &&
        troupe_registry_lookup(rt, at.name, &a) != TROUPE_OK) {
        *e = troupe__errf(TROUPE_ENOENT, "gtx: no actor registered as %s",
                          at.name);
        return false;
    }
    if (actor > 0)
        return true;
    troupe_target *t = troupe__target_find(rt, k->target, n);
    if (t == NULL) {
        *e = troupe__errf(TROUPE_ENOENT, "gtx: no dispatch target named %s",
                          k->target);
        return false;
    }
    troupe__target_release(t);
    return true;
}

static troupe_err
copy_call(tc_call *d, const troupe_gtx_call *k)
{
    if (k->target == NULL)
        return TROUPE_OK;
    size_t n = strlen(k->target) + 1;
    if ((d->target = troupe_malloc(n)) == NULL)
        return TROUPE_ENOMEM;
    memcpy(d->target, k->target, n);
    d->state = TC_TODO;
    if (k->payload_len > 0) {
        if ((d->payload = troupe_malloc(k->payload_len)) == NULL)
            return TROUPE_ENOMEM;
        memcpy(d->payload, k->payload, k->payload_len);
    }
    d->payload_len = k->payload_len;
    return TROUPE_OK;
}

static troupe_err
saga_build(troupe_coord *c, const troupe_saga_step *steps, size_t n,
           const troupe_saga_opts *o, tc_gtx **out)
{
    tc_gtx *g = troupe_calloc(1, sizeof(*g));
    if (g == NULL ||
        (n > 0 && (g->steps = troupe_calloc(n, sizeof(*g->steps))) == NULL)) {
        troupe_free(g);
        return TROUPE_ENOMEM;
    }
    g->mode = TROUPE_MODE_SAGA;
    g->status = TC_SUBMITTED;
    g->n_steps = (uint32_t)n;
    troupe_err e = TROUPE_OK;
    for (size_t i = 0; i < n && e == TROUPE_OK; i++) {
        e = copy_call(&g->steps[i].call[0], &steps[i].action);
        if (e == TROUPE_OK)
            e = copy_call(&g->steps[i].call[1], &steps[i].compensate);
    }
    int64_t now = troupe__coord_now(c);
    g->created_ms = g->updated_ms = now > 0 ? now : 0;
    g->opts = (tc_opts){.timeout_to_fail_ms = o ? o->timeout_to_fail_ms : 0,
                        .retry_limit = o ? o->retry_limit : 0,
                        .retry_min_ms = c->retry_min_ms,
                        .retry_max_ms = c->retry_max_ms,
                        .branch_timeout_ms = c->branch_timeout_ms};
    if (e == TROUPE_OK && o != NULL && o->concurrent) {
        /* one mask per step, zero when the caller gave no order */
        if ((g->after = troupe_calloc(n > 0 ? n : 1, sizeof(*g->after))) ==
            NULL)
            e = TROUPE_ENOMEM;
        else if (o->after != NULL && n > 0)
            memcpy(g->after, o->after, n * sizeof(*g->after));
        if (e == TROUPE_OK && !troupe__gtx_order_valid(g->after, (uint32_t)n))
            e = troupe__errf(TROUPE_EINVAL,
                             "saga: a step order names a step past the "
                             "last, the step itself, or makes a cycle");
    } else if (e == TROUPE_OK && o != NULL && o->after != NULL) {
        e = troupe__errf(TROUPE_EINVAL,
                         "saga: a step order without concurrent steps");
    }
    if (e != TROUPE_OK) {
        troupe__gtx_free(g);
        return e;
    }
    *out = g;
    return TROUPE_OK;
}

/* ---- completions: every call is asynchronous, its _wait a twin ---- */

/* A _wait twin's callback: releases the waiter it was given. */
static void
wait_cb(troupe_err err, void *arg)
{
    troupe__waiter_release(arg, err, NULL);
}

/* A submit of the caller's, from the call to its callback. */
typedef struct sub_call {
    tc_submit sub;
    troupe_coord_cb cb;
    void *arg;
} sub_call;

static void
sub_fire(tc_done *d, troupe_err err)
{
    sub_call *s = (sub_call *)(void *)((char *)d - offsetof(sub_call, sub));
    troupe_coord_cb cb = s->cb;
    void *arg = s->arg;
    troupe__gtx_free(s->sub.g);
    troupe_free(s);
    cb(err, arg);
}

static void
drop_submit(void *ptr)
{
    tc_submit *sub = ptr;
    sub->done.fn(&sub->done, TROUPE_ECLOSED);
}

/* Hands a new transaction (g, consumed) to gid's shard; cb hears its
 * first commit (OK too when gid exists already). An error returned: cb
 * never fires. */
static troupe_err
hand_over(troupe_coord *c, const char *gid, size_t gid_len, tc_gtx *g,
          troupe_coord_cb cb, void *arg)
{
    sub_call *s = troupe_calloc(1, sizeof(*s));
    troupe_msg *m = NULL;
    troupe_err e =
        s == NULL ? TROUPE_ENOMEM : troupe_msg_create(&m, TC_K_SUBMIT, NULL, 0);
    if (e != TROUPE_OK) {
        troupe__gtx_free(g);
        troupe_free(s);
        return e;
    }
    s->sub = (tc_submit){.done = {sub_fire}, .g = g, .gid_len = gid_len};
    memcpy(s->sub.gid, gid, gid_len);
    s->cb = cb;
    s->arg = arg;
    m->ptr = &s->sub;
    m->ptr_drop = drop_submit;
    uint32_t sh = troupe_gtx_shard_of(gid, gid_len, c->n_shards);
    (void)troupe_runtime_send(c->rt, c->shards[sh], &m); /* drops: ECLOSED */
    return TROUPE_OK;
}

/* The checks every call makes first: c, the callback (unless a twin's),
 * the state, the gid. */
static troupe_err
checked(troupe_coord *c, const char *gid, size_t gid_len, const void *cb,
        const char *what)
{
    if (c == NULL || cb == NULL)
        return troupe__errf(TROUPE_EINVAL, "%s: NULL coordinator or callback",
                            what);
    if (atomic_load(&c->state) != 0)
        return troupe__errf(TROUPE_ECLOSED, "%s: the coordinator stopped",
                            what);
    if (!troupe_gid_valid(gid, gid_len))
        return troupe__errf(TROUPE_EINVAL,
                            "%s: the gid must be 1..%d bytes of "
                            "[A-Za-z0-9_.:-]",
                            what, TROUPE_GID_MAX);
    return TROUPE_OK;
}

troupe_err
troupe_saga_submit(troupe_coord *c, const char *gid, size_t gid_len,
                   const troupe_saga_step *steps, size_t n,
                   const troupe_saga_opts *o, troupe_coord_cb cb, void *arg)
{
    troupe_err e = checked(c, gid, gid_len, (const void *)cb, "saga");
    if (e != TROUPE_OK)
        return e;
    if (steps == NULL && n > 0)
        return troupe__errf(TROUPE_EINVAL, "saga: NULL steps");
    if (n > TROUPE_GTX_STEPS_MAX)
        return troupe__errf(TROUPE_EINVAL, "saga: %zu steps, at most %d", n,
                            TROUPE_GTX_STEPS_MAX);
    if (o != NULL && o->timeout_to_fail_ms < 0)
        return troupe__errf(TROUPE_EINVAL, "saga: a negative timeout");
    for (size_t i = 0; i < n; i++)
        if (!call_valid(c->rt, &steps[i].action, false, &e) ||
            !call_valid(c->rt, &steps[i].compensate, true, &e))
            return e;
    tc_gtx *g = NULL;
    if ((e = saga_build(c, steps, n, o, &g)) != TROUPE_OK)
        return e;
    return hand_over(c, gid, gid_len, g, cb, arg);
}

troupe_err
troupe_saga_submit_wait(troupe_coord *c, const char *gid, size_t gid_len,
                        const troupe_saga_step *steps, size_t n,
                        const troupe_saga_opts *o)
{
    troupe_err be = troupe__block_check("troupe_saga_submit_wait");
    if (be != TROUPE_OK)
        return be;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    troupe_err e =
        troupe_saga_submit(c, gid, gid_len, steps, n, o, wait_cb, &w);
    return troupe__waiter_finish(&w, e, NULL);
}

/* ---- tcc and messages ---- */

/* A transaction of mode m, prepared, with room for n steps. */
static troupe_err
prepared_new(troupe_coord *c, troupe_gtx_mode m, size_t n, tc_gtx **out)
{
    tc_gtx *g = troupe_calloc(1, sizeof(*g));
    if (g == NULL ||
        (n > 0 && (g->steps = troupe_calloc(n, sizeof(*g->steps))) == NULL)) {
        troupe_free(g);
        return TROUPE_ENOMEM;
    }
    g->mode = m;
    g->status = TC_PREPARED;
    g->n_steps = (uint32_t)n;
    int64_t now = troupe__coord_now(c);
    g->created_ms = g->updated_ms = now > 0 ? now : 0;
    g->opts = (tc_opts){.retry_min_ms = c->retry_min_ms,
                        .retry_max_ms = c->retry_max_ms,
                        .branch_timeout_ms = c->branch_timeout_ms};
    /* a tcc or xa never submitted aborts: nothing stays reserved or
     * prepared for an application that died */
    if (m == TROUPE_MODE_TCC || m == TROUPE_MODE_XA)
        g->opts.timeout_to_fail_ms = c->tcc_timeout_ms;
    *out = g;
    return TROUPE_OK;
}

/* A tcc's or an xa's first phase: gid stored prepared with no branch. */
static troupe_err
prepare_empty(troupe_coord *c, troupe_gtx_mode m, const char *gid,
              size_t gid_len, troupe_coord_cb cb, void *arg, const char *what)
{
    troupe_err e = checked(c, gid, gid_len, (const void *)cb, what);
    tc_gtx *g = NULL;
    if (e == TROUPE_OK)
        e = prepared_new(c, m, 0, &g);
    return e == TROUPE_OK ? hand_over(c, gid, gid_len, g, cb, arg) : e;
}

troupe_err
troupe_tcc_prepare(troupe_coord *c, const char *gid, size_t gid_len,
                   troupe_coord_cb cb, void *arg)
{
    return prepare_empty(c, TROUPE_MODE_TCC, gid, gid_len, cb, arg,
                         "tcc prepare");
}

troupe_err
troupe_tcc_prepare_wait(troupe_coord *c, const char *gid, size_t gid_len)
{
    troupe_err be = troupe__block_check("troupe_tcc_prepare_wait");
    if (be != TROUPE_OK)
        return be;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    troupe_err e = troupe_tcc_prepare(c, gid, gid_len, wait_cb, &w);
    return troupe__waiter_finish(&w, e, NULL);
}

troupe_err
troupe_msg_prepare(troupe_coord *c, const char *gid, size_t gid_len,
                   const troupe_gtx_call *steps, size_t n,
                   const troupe_gtx_call *query, int64_t grace_ms,
                   troupe_coord_cb cb, void *arg)
{
    troupe_err e = checked(c, gid, gid_len, (const void *)cb, "msg prepare");
    if (e != TROUPE_OK)
        return e;
    if ((steps == NULL && n > 0) || query == NULL || grace_ms < 0)
        return troupe__errf(TROUPE_EINVAL, "msg: NULL steps or query, or a "
                                           "negative grace period");
    if (n > TROUPE_GTX_STEPS_MAX)
        return troupe__errf(TROUPE_EINVAL, "msg: %zu steps, at most %d", n,
                            TROUPE_GTX_STEPS_MAX);
    if (query->target == NULL)
        return troupe__errf(TROUPE_EINVAL, "msg: a query-back target is "
                                           "required");
    for (size_t i = 0; i < n; i++)
        if (!call_valid(c->rt, &steps[i], false, &e))
            return e;
    if (!call_valid(c->rt, query, false, &e))
        return e;
    tc_gtx *g = NULL;
    if ((e = prepared_new(c, TROUPE_MODE_MSG, n, &g)) != TROUPE_OK)
        return e;
    for (size_t i = 0; i < n && e == TROUPE_OK; i++)
        e = copy_call(&g->steps[i].call[0], &steps[i]);
    if (e == TROUPE_OK)
        e = copy_call(&g->query, query);
    if (e != TROUPE_OK) {
        troupe__gtx_free(g);
        return e;
    }
    g->due_ms = g->created_ms + (grace_ms ? grace_ms : TROUPE_MSG_GRACE_MS);
    return hand_over(c, gid, gid_len, g, cb, arg);
}

troupe_err
troupe_msg_prepare_wait(troupe_coord *c, const char *gid, size_t gid_len,
                        const troupe_gtx_call *steps, size_t n,
                        const troupe_gtx_call *query, int64_t grace_ms)
{
    troupe_err be = troupe__block_check("troupe_msg_prepare_wait");
    if (be != TROUPE_OK)
        return be;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    troupe_err e = troupe_msg_prepare(c, gid, gid_len, steps, n, query,
                                      grace_ms, wait_cb, &w);
    return troupe__waiter_finish(&w, e, NULL);
}

/* ---- ops on a live transaction ---- */

/* An op of the caller's, from the call to its callback (a register's
 * with its branch id). */
typedef struct op_call {
    tc_op op;
    troupe_coord *c;
    troupe_coord_cb cb;
    troupe_tcc_register_cb rcb;
    void *arg;
} op_call;

static void
op_finish(op_call *o, troupe_err err)
{
    char bid[8] = "";
    if (err == TROUPE_OK && o->rcb != NULL)
        snprintf(bid, sizeof(bid), "%02u", (unsigned)o->op.branch_no + 1);
    troupe__gtx_step_fini(&o->op.branch); /* a register's, if not moved */
    troupe_free(o->op.payload);           /* a resolve's */
    troupe_coord_cb cb = o->cb;
    troupe_tcc_register_cb rcb = o->rcb;
    void *arg = o->arg;
    troupe_free(o);
    if (rcb != NULL)
        rcb(err, err == TROUPE_OK ? bid : NULL, arg);
    else
        cb(err, arg);
}

/* ENOENT from the shard (gid not live): ECONFLICT when gid is stored and
 * has ended, ENOENT otherwise (unknown, or of another mode). */
static void
op_stored(troupe_err err, troupe_rows *rows, void *arg)
{
    op_call *o = arg;
    troupe_coord *c = o->c;
    tc_gtx *g = NULL;
    bool ended = err == TROUPE_OK &&
                 troupe__coord_row_decode(&rows->rows[0], &g) == TROUPE_OK &&
                 troupe__gtx_final(g);
    troupe__gtx_free(g);
    troupe_rows_destroy(rows);
    op_finish(o, ended ? TROUPE_ECONFLICT : TROUPE_ENOENT);
    troupe__waiter_release(&c->calls, TROUPE_OK, NULL); /* last touch */
}

static void
op_fire(tc_done *d, troupe_err err)
{
    op_call *o = (op_call *)(void *)((char *)d - offsetof(op_call, op));
    if (err == TROUPE_ENOENT) { /* on a running shard: the stop waits */
        troupe_coord *c = o->c;
        troupe__waiter_hold(&c->calls);
        if (troupe_table_get(c->tables, TROUPE_GTX_TABLE, o->op.gid,
                             o->op.gid_len, op_stored, o) == TROUPE_OK)
            return;
        troupe__waiter_release(&c->calls, TROUPE_OK, NULL);
    }
    op_finish(o, err);
}

static void
drop_op(void *ptr)
{
    tc_op *op = ptr;
    op->done.fn(&op->done, TROUPE_ECLOSED);
}

/* Sends o (the caller's op, consumed) to gid's shard. An error returned:
 * no callback. */
static troupe_err
op_send(troupe_coord *c, op_call *o, const char *gid, size_t gid_len)
{
    o->c = c;
    o->op.done.fn = op_fire;
    o->op.gid_len = gid_len;
    memcpy(o->op.gid, gid, gid_len);
    troupe_msg *m = NULL;
    troupe_err e = troupe_msg_create(&m, TC_K_OP, NULL, 0);
    if (e != TROUPE_OK) {
        troupe__gtx_step_fini(&o->op.branch);
        troupe_free(o);
        return e;
    }
    m->ptr = &o->op;
    m->ptr_drop = drop_op;
    uint32_t s = troupe_gtx_shard_of(gid, gid_len, c->n_shards);
    (void)troupe_runtime_send(c->rt, c->shards[s], &m); /* drops: ECLOSED */
    return TROUPE_OK;
}

static troupe_err
simple_op(troupe_coord *c, tc_opkind k, const char *gid, size_t gid_len,
          const char *reason, troupe_coord_cb cb, void *arg, const char *what)
{
    troupe_err e = checked(c, gid, gid_len, (const void *)cb, what);
    if (e != TROUPE_OK)
        return e;
    size_t rl = reason != NULL ? strlen(reason) : 0;
    if (rl > 0 && !troupe_gtx_abort_reason_valid(reason, rl))
        return troupe__errf(TROUPE_EINVAL,
                            "gtx abort: a reason is 1..%d bytes of UTF-8 "
                            "without control characters",
                            TROUPE_GTX_ABORT_REASON_MAX);
    op_call *o = troupe_calloc(1, sizeof(*o));
    if (o == NULL)
        return TROUPE_ENOMEM;
    o->op.kind = k;
    o->cb = cb;
    o->arg = arg;
    if (k == TC_OP_ABORT)
        snprintf(o->op.reason, sizeof(o->op.reason), "aborted%s%s",
                 rl > 0 ? ": " : "", rl > 0 ? reason : "");
    return op_send(c, o, gid, gid_len);
}

/* The twin of an op: its callback's error, with a message that names gid
 * (the message of a callback's thread does not reach this one). */
static troupe_err
op_wait_end(troupe__waiter *w, troupe_err started, const char *gid,
            size_t gid_len)
{
    troupe_err e = troupe__waiter_finish(w, started, NULL);
    if (started != TROUPE_OK)
        return e;
    if (e == TROUPE_ENOENT)
        return troupe__errf(e, "no transaction %.*s (of that mode)",
                            (int)gid_len, gid);
    if (e == TROUPE_ECONFLICT)
        return troupe__errf(e,
                            "gtx %.*s: has ended, or is not in a state for "
                            "that",
                            (int)gid_len, gid);
    return e;
}

#define OP_TWIN(name, call)                                                    \
    troupe_err be = troupe__block_check(name);                                 \
    if (be != TROUPE_OK)                                                       \
        return be;                                                             \
    troupe__waiter w;                                                          \
    troupe__waiter_init(&w, 1);                                                \
    return op_wait_end(&w, call, gid, gid_len)

troupe_err
troupe_gtx_submit(troupe_coord *c, const char *gid, size_t gid_len,
                  troupe_coord_cb cb, void *arg)
{
    return simple_op(c, TC_OP_SUBMIT, gid, gid_len, NULL, cb, arg,
                     "gtx submit");
}

troupe_err
troupe_gtx_abort(troupe_coord *c, const char *gid, size_t gid_len,
                 const char *reason, troupe_coord_cb cb, void *arg)
{
    return simple_op(c, TC_OP_ABORT, gid, gid_len, reason, cb, arg,
                     "gtx abort");
}

troupe_err
troupe_gtx_retry(troupe_coord *c, const char *gid, size_t gid_len,
                 troupe_coord_cb cb, void *arg)
{
    return simple_op(c, TC_OP_RETRY, gid, gid_len, NULL, cb, arg, "gtx retry");
}

troupe_err
troupe_gtx_force_stop(troupe_coord *c, const char *gid, size_t gid_len,
                      troupe_coord_cb cb, void *arg)
{
    return simple_op(c, TC_OP_FORCE_STOP, gid, gid_len, NULL, cb, arg,
                     "gtx force-stop");
}

troupe_err
troupe_gtx_submit_wait(troupe_coord *c, const char *gid, size_t gid_len)
{
    OP_TWIN("troupe_gtx_submit_wait",
            troupe_gtx_submit(c, gid, gid_len, wait_cb, &w));
}

troupe_err
troupe_gtx_abort_wait(troupe_coord *c, const char *gid, size_t gid_len,
                      const char *reason)
{
    OP_TWIN("troupe_gtx_abort_wait",
            troupe_gtx_abort(c, gid, gid_len, reason, wait_cb, &w));
}

troupe_err
troupe_gtx_retry_wait(troupe_coord *c, const char *gid, size_t gid_len)
{
    OP_TWIN("troupe_gtx_retry_wait",
            troupe_gtx_retry(c, gid, gid_len, wait_cb, &w));
}

troupe_err
troupe_gtx_force_stop_wait(troupe_coord *c, const char *gid, size_t gid_len)
{
    OP_TWIN("troupe_gtx_force_stop_wait",
            troupe_gtx_force_stop(c, gid, gid_len, wait_cb, &w));
}

/* want: 0 for the next branch, else the caller's index + 1. */
static troupe_err
tcc_register(troupe_coord *c, const char *gid, size_t gid_len, uint32_t want,
             const troupe_gtx_call *confirm, const troupe_gtx_call *cancel,
             troupe_tcc_register_cb cb, void *arg)
{
    troupe_err e = checked(c, gid, gid_len, (const void *)cb, "tcc register");
    if (e != TROUPE_OK)
        return e;
    if (confirm == NULL || cancel == NULL)
        return troupe__errf(TROUPE_EINVAL, "tcc: NULL confirm or cancel");
    if (!call_valid(c->rt, confirm, false, &e) ||
        !call_valid(c->rt, cancel, false, &e))
        return e;
    op_call *o = troupe_calloc(1, sizeof(*o));
    if (o == NULL)
        return TROUPE_ENOMEM;
    o->op.kind = TC_OP_REGISTER;
    o->op.mode = TROUPE_MODE_TCC;
    o->op.want = want;
    o->rcb = cb;
    o->arg = arg;
    e = copy_call(&o->op.branch.call[1], confirm); /* confirm, then cancel */
    if (e == TROUPE_OK)
        e = copy_call(&o->op.branch.call[2], cancel);
    if (e != TROUPE_OK) {
        troupe__gtx_step_fini(&o->op.branch);
        troupe_free(o);
        return e;
    }
    return op_send(c, o, gid, gid_len);
}

troupe_err
troupe_tcc_register(troupe_coord *c, const char *gid, size_t gid_len,
                    const troupe_gtx_call *confirm,
                    const troupe_gtx_call *cancel, troupe_tcc_register_cb cb,
                    void *arg)
{
    return tcc_register(c, gid, gid_len, 0, confirm, cancel, cb, arg);
}

troupe_err
troupe_tcc_register_at(troupe_coord *c, const char *gid, size_t gid_len,
                       const char *branch_id, const troupe_gtx_call *confirm,
                       const troupe_gtx_call *cancel, troupe_tcc_register_cb cb,
                       void *arg)
{
    if (branch_id == NULL || strlen(branch_id) != 2 || branch_id[0] < '0' ||
        branch_id[0] > '9' || branch_id[1] < '0' || branch_id[1] > '9')
        return troupe__errf(TROUPE_EINVAL,
                            "tcc: branch id must be two digits, 01..%02d",
                            TROUPE_GTX_STEPS_MAX);
    unsigned no = (unsigned)(branch_id[0] - '0') * 10 + (branch_id[1] - '0');
    if (no < 1 || no > TROUPE_GTX_STEPS_MAX)
        return troupe__errf(TROUPE_EINVAL,
                            "tcc: branch id %s is outside 01..%02d", branch_id,
                            TROUPE_GTX_STEPS_MAX);
    return tcc_register(c, gid, gid_len, no, confirm, cancel, cb, arg);
}

/* troupe_tcc_register_wait's callback: the branch id, then the waiter. */
typedef struct reg_wait {
    troupe__waiter w;
    char *branch_id;
} reg_wait;

static void
reg_wait_cb(troupe_err err, const char *branch_id, void *arg)
{
    reg_wait *rw = arg;
    if (err == TROUPE_OK)
        snprintf(rw->branch_id, 8, "%s", branch_id);
    troupe__waiter_release(&rw->w, err, NULL);
}

troupe_err
troupe_tcc_register_wait(troupe_coord *c, const char *gid, size_t gid_len,
                         const troupe_gtx_call *confirm,
                         const troupe_gtx_call *cancel, char branch_id[8])
{
    troupe_err be = troupe__block_check("troupe_tcc_register_wait");
    if (be != TROUPE_OK)
        return be;
    if (branch_id == NULL)
        return troupe__errf(TROUPE_EINVAL, "tcc: NULL branch_id");
    reg_wait rw = {.branch_id = branch_id};
    troupe__waiter_init(&rw.w, 1);
    troupe_err e =
        troupe_tcc_register(c, gid, gid_len, confirm, cancel, reg_wait_cb, &rw);
    return op_wait_end(&rw.w, e, gid, gid_len);
}

/* ---- xa over troupe's tables ---- */

troupe_err
troupe_xa_begin(troupe_coord *c, const char *gid, size_t gid_len,
                troupe_coord_cb cb, void *arg)
{
    return prepare_empty(c, TROUPE_MODE_XA, gid, gid_len, cb, arg, "xa begin");
}

troupe_err
troupe_xa_begin_wait(troupe_coord *c, const char *gid, size_t gid_len)
{
    troupe_err be = troupe__block_check("troupe_xa_begin_wait");
    if (be != TROUPE_OK)
        return be;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    troupe_err e = troupe_xa_begin(c, gid, gid_len, wait_cb, &w);
    return troupe__waiter_finish(&w, e, NULL);
}

/* An xa branch on its way: registered, then its transaction prepared
 * under "gid/branch-id". */
typedef struct xa_branch_call {
    troupe_txn *tx;
    troupe_tcc_register_cb cb;
    void *arg;
    char xid[TROUPE_GID_MAX + 8];
    size_t gid_len;
    char bid[8];
} xa_branch_call;

static void
xa_prepared(troupe_txn *tx, troupe_err err, const troupe_txn_conflict *cf,
            size_t n, void *arg)
{
    (void)tx;
    (void)cf;
    (void)n;
    xa_branch_call *x = arg;
    troupe_tcc_register_cb cb = x->cb;
    void *cb_arg = x->arg;
    char bid[8];
    memcpy(bid, x->bid, sizeof(bid));
    troupe_free(x);
    cb(err, err == TROUPE_OK ? bid : NULL, cb_arg);
}

static void
xa_registered(troupe_err err, const char *branch_id, void *arg)
{
    xa_branch_call *x = arg;
    if (err == TROUPE_OK) {
        snprintf(x->bid, sizeof(x->bid), "%s", branch_id);
        size_t xl =
            (size_t)snprintf(x->xid + x->gid_len, sizeof(x->xid) - x->gid_len,
                             "/%s", branch_id) +
            x->gid_len;
        err = troupe_txn_prepare(x->tx, x->xid, xl, xa_prepared, x);
        if (err == TROUPE_OK)
            return; /* xa_prepared answers */
    }
    troupe_tcc_register_cb cb = x->cb;
    void *cb_arg = x->arg;
    troupe_free(x);
    cb(err, NULL, cb_arg);
}

troupe_err
troupe_xa_branch(troupe_coord *c, const char *gid, size_t gid_len,
                 troupe_txn *tx, troupe_tcc_register_cb cb, void *arg)
{
    troupe_err e = checked(c, gid, gid_len, (const void *)cb, "xa branch");
    if (e != TROUPE_OK)
        return e;
    if (tx == NULL)
        return troupe__errf(TROUPE_EINVAL, "xa branch: NULL transaction");
    op_call *o = troupe_calloc(1, sizeof(*o));
    xa_branch_call *x = troupe_calloc(1, sizeof(*x));
    static const troupe_gtx_call builtin = {.target = TROUPE_XA_TARGET};
    if (o == NULL || x == NULL) {
        troupe_free(o);
        troupe_free(x);
        return TROUPE_ENOMEM;
    }
    x->tx = tx;
    x->cb = cb;
    x->arg = arg;
    x->gid_len = gid_len;
    memcpy(x->xid, gid, gid_len);
    o->op.kind = TC_OP_REGISTER;
    o->op.mode = TROUPE_MODE_XA;
    o->rcb = xa_registered;
    o->arg = x;
    e = copy_call(&o->op.branch.call[0], &builtin); /* commit, rollback */
    if (e == TROUPE_OK)
        e = copy_call(&o->op.branch.call[1], &builtin);
    if (e == TROUPE_OK)
        e = op_send(c, o, gid, gid_len); /* frees o on error */
    else {
        troupe__gtx_step_fini(&o->op.branch);
        troupe_free(o);
    }
    if (e != TROUPE_OK)
        troupe_free(x);
    return e;
}

troupe_err
troupe_xa_branch_wait(troupe_coord *c, const char *gid, size_t gid_len,
                      troupe_txn *tx, char branch_id[8])
{
    troupe_err be = troupe__block_check("troupe_xa_branch_wait");
    if (be != TROUPE_OK)
        return be;
    if (branch_id == NULL)
        return troupe__errf(TROUPE_EINVAL, "xa: NULL branch_id");
    reg_wait rw = {.branch_id = branch_id};
    troupe__waiter_init(&rw.w, 1);
    troupe_err started =
        troupe_xa_branch(c, gid, gid_len, tx, reg_wait_cb, &rw);
    troupe_err e = troupe__waiter_finish(&rw.w, started, NULL);
    if (started == TROUPE_OK && e == TROUPE_ENOENT)
        return troupe__errf(e, "xa %.*s: no such xa transaction", (int)gid_len,
                            gid);
    return e;
}

/* ---- workflows (troupe/workflow.h) ---- */

troupe_err
troupe_workflow_submit(troupe_coord *c, const char *gid, size_t gid_len,
                       const char *name, const void *input, size_t len,
                       troupe_coord_cb cb, void *arg)
{
    troupe_err e = checked(c, gid, gid_len, (const void *)cb, "workflow");
    if (e != TROUPE_OK)
        return e;
    troupe_gtx_call run = {
        .target = name, .payload = input, .payload_len = len};
    tc_actor_target at;
    if (name != NULL && troupe__actor_target_parse(name, &at) != 0)
        return troupe__errf(TROUPE_EINVAL,
                            "workflow: %s: a workflow is a dispatch target, "
                            "not an actor",
                            name);
    if (!call_valid(c->rt, &run, false, &e))
        return e;
    tc_gtx *g = NULL;
    if ((e = prepared_new(c, TROUPE_MODE_WORKFLOW, 0, &g)) != TROUPE_OK)
        return e;
    g->status = TC_SUBMITTED;
    if ((e = copy_call(&g->query, &run)) != TROUPE_OK) {
        troupe__gtx_free(g);
        return e;
    }
    return hand_over(c, gid, gid_len, g, cb, arg);
}

troupe_err
troupe_workflow_submit_wait(troupe_coord *c, const char *gid, size_t gid_len,
                            const char *name, const void *input, size_t len)
{
    troupe_err be = troupe__block_check("troupe_workflow_submit_wait");
    if (be != TROUPE_OK)
        return be;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    troupe_err e =
        troupe_workflow_submit(c, gid, gid_len, name, input, len, wait_cb, &w);
    return troupe__waiter_finish(&w, e, NULL);
}

/* An awakeable's id "gid/branch-id": the gid's length and the position. */
static bool
awakeable_id(const char *id, size_t len, size_t *gid_len, uint32_t *pos)
{
    const char *slash = id != NULL ? memrchr(id, '/', len) : NULL;
    char bid[8];
    size_t bl = slash != NULL ? len - (size_t)(slash - id) - 1 : 0;
    if (slash == NULL || bl == 0 || bl >= sizeof(bid) ||
        !troupe_gid_valid(id, (size_t)(slash - id)))
        return false;
    memcpy(bid, slash + 1, bl);
    bid[bl] = '\0';
    if (!troupe_branch_id_valid(bid))
        return false;
    *gid_len = (size_t)(slash - id);
    *pos = (uint32_t)strtoul(bid, NULL, 10) - 1;
    return true;
}

static troupe_err
resolve(troupe_coord *c, const char *id, size_t id_len, bool ok,
        const void *payload, size_t len, troupe_coord_cb cb, void *arg)
{
    size_t gl = 0;
    uint32_t pos = 0;
    if (!awakeable_id(id, id_len, &gl, &pos))
        return troupe__errf(TROUPE_EINVAL,
                            "awakeable: an id is gid/branch-id (\"g-1/02\")");
    troupe_err e = checked(c, id, gl, (const void *)cb, "awakeable");
    if (e != TROUPE_OK)
        return e;
    if ((payload == NULL && len > 0) || len > TROUPE_GTX_PAYLOAD_MAX)
        return troupe__errf(TROUPE_EINVAL,
                            "awakeable: a payload of at most %u bytes",
                            TROUPE_GTX_PAYLOAD_MAX);
    op_call *o = troupe_calloc(1, sizeof(*o));
    if (o == NULL ||
        (len > 0 && (o->op.payload = troupe_malloc(len)) == NULL)) {
        troupe_free(o);
        return TROUPE_ENOMEM;
    }
    if (len > 0)
        memcpy(o->op.payload, payload, len);
    o->op.payload_len = len;
    o->op.kind = TC_OP_RESOLVE;
    o->op.branch_no = pos;
    o->op.resolved = ok;
    o->cb = cb;
    o->arg = arg;
    return op_send(c, o, id, gl);
}

troupe_err
troupe_awakeable_resolve(troupe_coord *c, const char *id, size_t id_len,
                         const void *payload, size_t len, troupe_coord_cb cb,
                         void *arg)
{
    return resolve(c, id, id_len, true, payload, len, cb, arg);
}

troupe_err
troupe_awakeable_reject(troupe_coord *c, const char *id, size_t id_len,
                        const void *reason, size_t len, troupe_coord_cb cb,
                        void *arg)
{
    return resolve(c, id, id_len, false, reason, len, cb, arg);
}

/* An awakeable's twin: as an op's, the message naming the id. */
static troupe_err
resolve_wait(troupe_coord *c, const char *id, size_t id_len, bool ok,
             const void *payload, size_t len)
{
    troupe_err be = troupe__block_check("troupe_awakeable_resolve_wait");
    if (be != TROUPE_OK)
        return be;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    troupe_err started = resolve(c, id, id_len, ok, payload, len, wait_cb, &w);
    troupe_err e = troupe__waiter_finish(&w, started, NULL);
    if (started == TROUPE_OK && (e == TROUPE_ENOENT || e == TROUPE_ECONFLICT))
        return troupe__errf(e,
                            e == TROUPE_ENOENT
                                ? "awakeable %.*s: no such workflow or "
                                  "awakeable"
                                : "awakeable %.*s: resolved otherwise "
                                  "already, or its workflow has ended",
                            (int)(id_len > 140 ? 140 : id_len), id);
    return e;
}

troupe_err
troupe_awakeable_resolve_wait(troupe_coord *c, const char *id, size_t id_len,
                              const void *payload, size_t len)
{
    return resolve_wait(c, id, id_len, true, payload, len);
}

troupe_err
troupe_awakeable_reject_wait(troupe_coord *c, const char *id, size_t id_len,
                             const void *reason, size_t len)
{
    return resolve_wait(c, id, id_len, false, reason, len);
}
