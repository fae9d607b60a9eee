/*
 * A coordinator shard: the actor that owns the global transactions whose
 * gid hashes to it. For each live one it runs the modes' rules
 * (machine.c), commits the document (synced) and only then dispatches
 * the call the rules picked; the call's outcome, the commit's callback
 * and a freed credit come back as messages naming the gid. Nothing
 * polls: one timer at the earliest due time of the shard.
 */
#include <stdio.h>
#include <string.h>

#include "coord_int.h"
#include "troupe/actor.h"
#include "troupe/alloc.h"
#include "troupe/internal/dispatch.h"
#include "troupe/internal/runtime.h"
#include "troupe/log.h"
#include "troupe/xa.h"

/* What a message from another thread needs to reach the shard: the
 * runtime, the shard's address and the gid (the live transaction is
 * looked up again: it may be gone by then). */
typedef struct tc_post {
    troupe_coord *c; /* a table call's: its hold on c->calls */
    troupe_runtime *rt;
    troupe_addr to;
    troupe_target *t; /* a task's target, released when it settles */
    uint32_t step, op;
    bool insert;
    bool run; /* a workflow's run: its reply goes back whole */
    size_t gid_len;
    char gid[TROUPE_GID_MAX];
} tc_post;

/* A caller waiting for the next commit of a live transaction: a submit
 * (its first) or an op. */
typedef struct tc_waiter {
    struct tc_waiter *next;
    tc_done *d;
} tc_waiter;

/* One call of a live transaction on its way: waiting for credit on its
 * target, or submitted as a task whose outcome is not applied yet. */
typedef struct tc_flight {
    struct tc_flight *next;
    tc_ref ref;
    bool waiting; /* cw queued on t for credit */
    troupe_target *t;
    troupe__credit_wait cw;
    tc_post *kick; /* cw's arg */
    bool asked;    /* an actor target's ask: its reply carries corr */
    uint64_t corr;
    /* its outcome, heard while a commit was in flight: applied after
     * (with a workflow run's reply body, copied) */
    bool heard;
    troupe_outcome outcome;
    uint8_t *body;
    size_t body_len;
} tc_flight;

typedef struct tc_live {
    struct tc_live *next;
    char gid[TROUPE_GID_MAX];
    size_t gid_len;
    tc_gtx *g;
    bool writing;      /* a commit of g in flight */
    bool write_failed; /* the last one failed: again when due */
    /* the calls planned, dispatched once the commit is done */
    uint32_t n_run;
    tc_ref run[TROUPE_GTX_STEPS_MAX];
    tc_flight *flights;    /* the calls on their way */
    tc_waiter *subs;       /* callers waiting for the commit in flight */
    tc_op *ops, *ops_tail; /* ops that came while a commit was in flight */
} tc_live;

typedef struct shard {
    troupe_coord *c;
    troupe_actor *self;
    tc_live *lives;
    bool armed;
    uint64_t timer_id;
    int64_t timer_due;
} shard;

static tc_post *
post_new(shard *sh, const tc_live *l)
{
    tc_post *p = troupe_calloc(1, sizeof(*p));
    if (p != NULL) {
        p->c = sh->c;
        p->rt = sh->c->rt;
        p->to = troupe_self(sh->self);
        p->gid_len = l->gid_len;
        memcpy(p->gid, l->gid, l->gid_len);
    }
    return p;
}

/* Sends kind with body head[0..hl) + the gid; a shard gone drops it. */
static void
post_send(const tc_post *p, uint32_t kind, const void *head, size_t hl)
{
    uint8_t buf[16 + TROUPE_GID_MAX];
    memcpy(buf, head, hl);
    memcpy(buf + hl, p->gid, p->gid_len);
    troupe_msg *m = NULL;
    if (troupe_msg_create(&m, kind, buf, hl + p->gid_len) == TROUPE_OK)
        (void)troupe_runtime_send(p->rt, p->to, &m);
}

static tc_live *
find(shard *sh, const void *gid, size_t len)
{
    for (tc_live *l = sh->lives; l != NULL; l = l->next)
        if (l->gid_len == len && memcmp(l->gid, gid, len) == 0)
            return l;
    return NULL;
}

static void
reply_subs(tc_live *l, troupe_err e)
{
    while (l->subs != NULL) {
        tc_waiter *w = l->subs;
        l->subs = w->next;
        w->d->fn(w->d, e);
        troupe_free(w);
    }
}

static void
flight_free(tc_flight *f)
{
    if (f->waiting)
        troupe__target_credit_unwait(f->t, &f->cw);
    if (f->t != NULL)
        troupe__target_release(f->t);
    troupe_free(f->kick);
    troupe_free(f->body);
    troupe_free(f);
}

/* Takes f off l's flights and frees it. */
static void
flight_drop(tc_live *l, tc_flight *f)
{
    for (tc_flight **pp = &l->flights; *pp != NULL; pp = &(*pp)->next)
        if (*pp == f) {
            *pp = f->next;
            break;
        }
    flight_free(f);
}

static tc_flight *
flight_of(const tc_live *l, uint32_t step, uint32_t op)
{
    for (tc_flight *f = l->flights; f != NULL; f = f->next)
        if (f->ref.step == step && f->ref.op == op)
            return f;
    return NULL;
}

/* Nothing is planned while a commit is in flight, and for a sequential
 * transaction while a call is on its way whose outcome is not heard: that
 * outcome decides what is next. Concurrent sagas plan beside theirs. */
static bool
busy(const tc_live *l)
{
    if (l->writing)
        return true;
    if (l->g->after != NULL)
        return false;
    for (const tc_flight *f = l->flights; f != NULL; f = f->next)
        if (!f->heard)
            return true;
    return false;
}

static void
live_free(shard *sh, tc_live *l, troupe_err for_subs)
{
    for (tc_live **pp = &sh->lives; *pp != NULL; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    while (l->flights != NULL) {
        tc_flight *f = l->flights;
        l->flights = f->next;
        flight_free(f);
    }
    reply_subs(l, for_subs);
    bool final = troupe__gtx_final(l->g);
    while (l->ops != NULL) {
        tc_op *op = l->ops;
        l->ops = op->next;
        op->done.fn(&op->done, final ? TROUPE_ECONFLICT : for_subs);
    }
    troupe__gtx_free(l->g);
    troupe_free(l);
}

/* The one timer at the earliest due time. */
static void
arm(shard *sh, int64_t due)
{
    if (due <= 0 || (sh->armed && sh->timer_due <= due))
        return;
    if (sh->armed)
        (void)troupe_timer_cancel(sh->self, sh->timer_id);
    int64_t now = troupe__coord_now(sh->c);
    uint64_t after = due > now ? (uint64_t)(due - now) : 0;
    sh->armed = troupe_timer_start(sh->self, TC_K_TIMER, after, 0,
                                   &sh->timer_id) == TROUPE_OK;
    sh->timer_due = due;
}

/* ---- committing ---- */

static void
on_write(troupe_err err, troupe_rows *rows, void *arg)
{
    tc_post *p = arg;
    troupe_rows_destroy(rows);
    uint8_t head[5];
    int32_t e = (int32_t)err;
    memcpy(head, &e, 4);
    head[4] = p->insert;
    post_send(p, TC_K_WRITTEN, head, sizeof(head));
    troupe_coord *c = p->c;
    troupe_free(p);
    troupe__waiter_release(&c->calls, TROUPE_OK, NULL); /* last touch */
}

static void
written(shard *sh, tc_live *l, troupe_err err, bool insert);

/* Commits l's document: an insert the first time (a gid stored already
 * is EEXIST: the submit drives nothing), an upsert after. */
static void
write(shard *sh, tc_live *l, bool insert)
{
    tc_post *p = post_new(sh, l);
    troupe_packer pk;
    troupe_pack_init(&pk);
    l->g->updated_ms = troupe__coord_now(sh->c);
    troupe_err e = p == NULL ? TROUPE_ENOMEM : troupe__gtx_encode(l->g, &pk);
    if (e == TROUPE_OK) {
        size_t n = 0;
        const void *d = troupe_pack_data(&pk, &n);
        troupe_write_opts wo = {.sync = sh->c->sync, .no_timestamps = true};
        p->insert = insert;
        troupe__waiter_hold(&sh->c->calls);
        e = (insert ? troupe_table_insert : troupe_table_upsert)(
            sh->c->tables, TROUPE_GTX_TABLE, l->gid, l->gid_len, d, n, &wo,
            on_write, p);
        if (e != TROUPE_OK)
            troupe__waiter_release(&sh->c->calls, TROUPE_OK, NULL);
    }
    troupe_pack_fini(&pk);
    if (e == TROUPE_OK) {
        l->writing = true;
        return;
    }
    troupe_free(p);
    written(sh, l, e, insert);
}

/* ---- dispatching ---- */

/* A workflow run's outcome with its reply: body u32 outcome, u32 gid
 * length, the gid, the reply's bytes. Not sent: the run's flight hears
 * nothing, as for a lost task, until the transaction is loaded again. */
static void
post_run(const tc_post *p, troupe_outcome o, const uint8_t *body, size_t len)
{
    uint32_t head[2] = {(uint32_t)o, (uint32_t)p->gid_len};
    troupe_body *b = NULL;
    void *v = NULL;
    troupe_msg *m = NULL;
    if (troupe_body_alloc(8 + p->gid_len + len, &b, &v) != TROUPE_OK)
        return;
    uint8_t *d = v; /* the reply copied once, into the message's body */
    memcpy(d, head, 8);
    memcpy(d + 8, p->gid, p->gid_len);
    if (len > 0)
        memcpy(d + 8 + p->gid_len, body, len);
    if (troupe_msg_create_body(&m, TC_K_WFRUN, &b) == TROUPE_OK)
        (void)troupe_runtime_send(p->rt, p->to, &m);
}

static bool
on_task_done(void *arg, uint64_t id, troupe_outcome outcome,
             const uint8_t *body, size_t len)
{
    (void)id;
    tc_post *p = arg;
    if (p->run) {
        post_run(p, outcome, body, len);
    } else {
        uint32_t head[3] = {p->step, p->op, (uint32_t)outcome};
        post_send(p, TC_K_OUTCOME, head, sizeof(head));
    }
    troupe__target_release(p->t);
    troupe_free(p);
    return false;
}

static void
on_kick(void *arg)
{
    const tc_post *p = arg;
    uint32_t head[2] = {p->step, p->op};
    post_send(p, TC_K_KICK, head, sizeof(head));
}

static void
advance(shard *sh, tc_live *l, bool force);

/* Whether r is a workflow's run. */
static bool
is_run(const tc_gtx *g, tc_ref r)
{
    return r.step == TC_QUERY && g->mode == TROUPE_MODE_WORKFLOW;
}

/* The rule for outcome o of call r (a run's with its reply body). */
static troupe_err
apply(tc_gtx *g, tc_ref r, troupe_outcome o, const uint8_t *body, size_t len,
      int64_t now)
{
    if (is_run(g, r))
        return troupe__gtx_wf_apply(g, o, body, len, now);
    return troupe__gtx_apply(g, r, o, now);
}

/* The outcome o (and a run's reply body) of flight f: applied now and
 * planned on, or, while a commit is in flight, kept on f until it is
 * done (written). */
static void
hear_body(shard *sh, tc_live *l, tc_flight *f, troupe_outcome o,
          const uint8_t *body, size_t len)
{
    if (l->writing) {
        f->heard = true;
        f->outcome = o;
        if (body != NULL && (f->body = troupe_malloc(len > 0 ? len : 1)) ==
                                NULL) /* the reply lost: run again later */
            f->outcome = TROUPE_OUTCOME_UNKNOWN;
        else if (body != NULL && len > 0)
            memcpy(f->body, body, len);
        f->body_len = f->body != NULL ? len : 0;
        return;
    }
    tc_ref r = f->ref;
    flight_drop(l, f);
    if (apply(l->g, r, o, body, len, troupe__coord_now(sh->c)) == TROUPE_OK)
        advance(sh, l, true);
}

static void
hear(shard *sh, tc_live *l, tc_flight *f, troupe_outcome o)
{
    hear_body(sh, l, f, o, NULL, 0);
}

/* The outcomes heard during the last commit, applied together. */
static void
hear_kept(shard *sh, tc_live *l)
{
    bool moved = false;
    int64_t now = troupe__coord_now(sh->c);
    for (tc_flight **pp = &l->flights; *pp != NULL;) {
        tc_flight *f = *pp;
        if (!f->heard) {
            pp = &f->next;
            continue;
        }
        *pp = f->next;
        moved |= apply(l->g, f->ref, f->outcome, f->body, f->body_len, now) ==
                 TROUPE_OK;
        flight_free(f);
    }
    if (moved)
        advance(sh, l, true);
}

static const tc_call *
call_at(const tc_gtx *g, tc_ref r)
{
    return r.step == TC_QUERY ? &g->query : &g->steps[r.step].call[r.op];
}

/* The barrier's names of call r: its mode, branch id and op. */
static void
names_of(const tc_gtx *g, tc_ref r, const char **mode, char bid[8],
         const char **op)
{
    *mode = troupe_gtx_mode_name(g->mode);
    *op = is_run(g, r)         ? "run"
          : r.step == TC_QUERY ? "msg"
                               : troupe_gtx_op_at(g->mode, r.op);
    snprintf(bid, 8, "%02u", r.step == TC_QUERY ? 0u : (unsigned)r.step + 1);
}

/* Submits the task of f under a credit taken on t (ours now). */
static void
submit_task(shard *sh, tc_live *l, tc_flight *f, troupe_target *t)
{
    tc_ref r = f->ref;
    const tc_call *c = call_at(l->g, r);
    const char *mode = NULL, *op = NULL;
    char bid[8];
    names_of(l->g, r, &mode, bid, &op);
    uint8_t hdr[16 + TROUPE_GID_MAX + 16];
    size_t ml = strlen(mode) + 1, bl = strlen(bid) + 1, ol = strlen(op) + 1;
    size_t n = 0;
    memcpy(hdr + n, mode, ml);
    n += ml;
    memcpy(hdr + n, l->gid, l->gid_len);
    n += l->gid_len;
    hdr[n++] = '\0';
    memcpy(hdr + n, bid, bl);
    n += bl;
    memcpy(hdr + n, op, ol);
    n += ol;
    tc_post *p = post_new(sh, l);
    if (p == NULL) {
        troupe__target_credit_give(t);
        troupe__target_release(t);
        hear(sh, l, f, TROUPE_OUTCOME_UNKNOWN); /* not dispatched */
        return;
    }
    p->t = t;
    p->step = r.step;
    p->op = r.op;
    p->run = is_run(l->g, r);
    troupe__task_in in = {.kind = TROUPE_TASK_BRANCH,
                          .attempt = c->attempts,
                          .header = hdr,
                          .header_len = n,
                          .body = c->payload,
                          .body_len = c->payload_len};
    troupe_packer pk; /* a run's body: the input and the records */
    troupe_pack_init(&pk);
    troupe_err e = TROUPE_OK;
    if (p->run) {
        in.kind = TROUPE_TASK_WORKFLOW;
        if ((e = troupe__gtx_wf_task_body(l->g, &pk)) == TROUPE_OK &&
            (in.body = troupe_pack_data(&pk, &in.body_len)) == NULL)
            e = TROUPE_ENOMEM;
    }
    if (e != TROUPE_OK) {
        troupe__target_credit_give(t);
    } else if ((e = troupe__target_submit(t, &in, on_task_done, p, NULL)) !=
               TROUPE_OK) {
        /* the submit gave the credit back */
    }
    troupe_pack_fini(&pk);
    if (e != TROUPE_OK) {
        troupe__target_release(t);
        troupe_free(p);
        hear(sh, l, f, TROUPE_OUTCOME_UNKNOWN);
    }
}

/* Asks the actor at of f's call (troupe/branch.h): its reply, or the
 * runtime's error reply at the branch timeout, comes back as TC_K_REPLY. */
static void
ask_actor(shard *sh, tc_live *l, tc_flight *f, const tc_actor_target *at)
{
    troupe_addr to = at->addr;
    if (at->by_name &&
        troupe_registry_lookup(sh->c->rt, at->name, &to) != TROUPE_OK) {
        troupe_log(troupe_runtime_logger(sh->c->rt), TROUPE_LOG_WARN, "coord",
                   "gtx %.*s: no actor named %s: retried later",
                   (int)l->gid_len, l->gid, at->name);
        hear(sh, l, f, TROUPE_OUTCOME_UNKNOWN);
        return;
    }
    const tc_call *c = call_at(l->g, f->ref);
    const char *mode = NULL, *op = NULL;
    char bid[8];
    names_of(l->g, f->ref, &mode, bid, &op);
    troupe_packer pk;
    troupe_pack_init(&pk);
    troupe_err e =
        troupe__branch_msg_pack(&pk, mode, l->gid, l->gid_len, bid, op,
                                c->attempts, c->payload, c->payload_len);
    troupe_msg *m = NULL;
    if (e == TROUPE_OK) {
        size_t n = 0;
        const void *d = troupe_pack_data(&pk, &n);
        e = troupe_msg_create(&m, at->kind, d, n);
    }
    troupe_pack_fini(&pk);
    uint32_t timeout = l->g->opts.branch_timeout_ms;
    if (e == TROUPE_OK)
        e = troupe_ask(sh->self, to, &m, timeout > 0 ? timeout : 1, TC_K_REPLY,
                       &f->corr);
    if (e != TROUPE_OK) {
        hear(sh, l, f, TROUPE_OUTCOME_UNKNOWN);
        return;
    }
    f->asked = true;
}

/* An xa branch's resolution, done: its outcome to the shard. A
 * resolution the other way already (ECONFLICT) is FAILURE (logged: it
 * never moves on), every other error UNKNOWN (tried again later). */
static void
on_xa_resolved(troupe_err err, void *arg)
{
    tc_post *p = arg;
    troupe_outcome o = err == TROUPE_OK          ? TROUPE_OUTCOME_SUCCESS
                       : err == TROUPE_ECONFLICT ? TROUPE_OUTCOME_FAILURE
                                                 : TROUPE_OUTCOME_UNKNOWN;
    if (err == TROUPE_ECONFLICT)
        troupe_log(troupe_runtime_logger(p->rt), TROUPE_LOG_ERROR, "coord",
                   "xa %.*s/%02u: resolved the other way already",
                   (int)p->gid_len, p->gid, (unsigned)p->step + 1);
    uint32_t head[3] = {p->step, p->op, (uint32_t)o};
    post_send(p, TC_K_OUTCOME, head, sizeof(head));
    troupe_coord *c = p->c;
    troupe_free(p);
    troupe__waiter_release(&c->calls, TROUPE_OK, NULL); /* last touch */
}

/* Call r of an xa branch (TROUPE_XA_TARGET): its xid gid/branch-id
 * committed (op 0) or rolled back (op 1) on the coordinator's tables,
 * asynchronously (troupe/xa.h): no thread waits on the synced write. */
static void
xa_resolve(shard *sh, tc_live *l, tc_flight *f, tc_ref r)
{
    char xid[TROUPE_GID_MAX + 8];
    memcpy(xid, l->gid, l->gid_len);
    int n = snprintf(xid + l->gid_len, sizeof(xid) - l->gid_len, "/%02u",
                     (unsigned short)(r.step + 1));
    tc_post *p = post_new(sh, l);
    troupe_err e = TROUPE_ENOMEM;
    if (p != NULL) {
        p->step = r.step;
        p->op = r.op;
        troupe__waiter_hold(&sh->c->calls);
        e = (r.op == 0 ? troupe_xa_commit : troupe_xa_rollback)(
            sh->c->tables, xid, l->gid_len + (size_t)n, on_xa_resolved, p);
        if (e != TROUPE_OK)
            troupe__waiter_release(&sh->c->calls, TROUPE_OK, NULL);
    }
    if (e != TROUPE_OK) { /* nothing sent: again after the backoff */
        troupe_free(p);
        hear(sh, l, f, TROUPE_OUTCOME_UNKNOWN);
    }
}

/* Starts call r on its way: a flight that asks its actor target, or
 * takes a credit on its dispatch target (or waits for one) and submits
 * the task. A call that cannot go counts as UNKNOWN (retried after its
 * backoff). */
static void
dispatch(shard *sh, tc_live *l, tc_ref r)
{
    tc_flight *f = troupe_calloc(1, sizeof(*f));
    if (f == NULL) { /* UNKNOWN; planned on once no commit is in flight */
        int64_t now = troupe__coord_now(sh->c);
        if (troupe__gtx_apply(l->g, r, TROUPE_OUTCOME_UNKNOWN, now) ==
            TROUPE_OK)
            advance(sh, l, true);
        return;
    }
    f->ref = r;
    f->next = l->flights;
    l->flights = f;
    const tc_call *c = call_at(l->g, r);
    if (l->g->mode == TROUPE_MODE_XA && r.step != TC_QUERY &&
        strcmp(c->target, TROUPE_XA_TARGET) == 0) {
        xa_resolve(sh, l, f, r);
        return;
    }
    tc_actor_target at;
    int is_actor = troupe__actor_target_parse(c->target, &at);
    if (is_actor != 0) {
        if (is_actor > 0 && !is_run(l->g, r))
            ask_actor(sh, l, f, &at);
        else /* refused at submit; a stored one is read as it is */
            hear(sh, l, f, TROUPE_OUTCOME_UNKNOWN);
        return;
    }
    troupe_target *t =
        troupe__target_find(sh->c->rt, c->target, strlen(c->target));
    if (t == NULL) {
        troupe_log(troupe_runtime_logger(sh->c->rt), TROUPE_LOG_WARN, "coord",
                   "gtx %.*s: no target %s: retried later", (int)l->gid_len,
                   l->gid, c->target);
        hear(sh, l, f, TROUPE_OUTCOME_UNKNOWN);
        return;
    }
    if ((f->kick = post_new(sh, l)) == NULL) {
        troupe__target_release(t);
        hear(sh, l, f, TROUPE_OUTCOME_UNKNOWN);
        return;
    }
    f->kick->step = r.step;
    f->kick->op = r.op;
    f->cw.kick = on_kick;
    f->cw.arg = f->kick;
    if (!troupe__target_credit_take(t, &f->cw)) {
        f->t = t; /* kept until the kick */
        f->waiting = true;
        return;
    }
    submit_task(sh, l, f, t);
}

/* ---- the rules' shell ---- */

/* Plans l and commits what moved; force: l changed already (an outcome
 * applied, a load). */
static void
advance(shard *sh, tc_live *l, bool force)
{
    if (l->writing)
        return;    /* the change goes with the next commit (written plans) */
    if (busy(l)) { /* its outcome plans what is next */
        write(sh, l, false);
        return;
    }
    tc_plan p;
    troupe__gtx_plan(l->g, troupe__coord_now(sh->c), &p);
    l->n_run = p.n_run;
    memcpy(l->run, p.run, p.n_run * sizeof(p.run[0]));
    if (force || p.changed || p.n_run > 0) {
        write(sh, l, false);
        return;
    }
    arm(sh, l->g->due_ms);
}

/* Applies op to l: the rule (machine.c), then a commit whose end
 * releases the caller, or the caller released now when nothing moved. */
static void
op_apply(shard *sh, tc_live *l, tc_op *op)
{
    bool changed = false;
    troupe_err e;
    switch (op->kind) {
    case TC_OP_SUBMIT:
        e = troupe__gtx_submit(l->g, &changed);
        break;
    case TC_OP_ABORT:
        e = troupe__gtx_abort_why(l->g, troupe__coord_now(sh->c), op->reason,
                                  &changed);
        break;
    case TC_OP_RETRY:
        e = troupe__gtx_retry(l->g, &changed);
        break;
    case TC_OP_FORCE_STOP:
        e = troupe__gtx_force_stop(l->g, troupe__coord_now(sh->c));
        changed = e == TROUPE_OK;
        break;
    case TC_OP_RESOLVE:
        e = troupe__gtx_wf_resolve(l->g, op->branch_no, op->resolved,
                                   op->payload, op->payload_len, &changed);
        break;
    default:
        if (op->want != 0) {
            e = troupe__gtx_register_at(l->g, op->mode, &op->branch,
                                        op->want - 1, &op->branch_no, &changed);
        } else {
            e = troupe__gtx_register(l->g, op->mode, &op->branch,
                                     &op->branch_no);
            changed = e == TROUPE_OK;
        }
        break;
    }
    tc_waiter *w = NULL;
    if (e == TROUPE_OK && changed && (w = troupe_calloc(1, sizeof(*w))) == NULL)
        e = TROUPE_ENOMEM; /* the change stays in memory: the next commit */
    if (e != TROUPE_OK || !changed) {
        op->done.fn(&op->done, e);
        return;
    }
    w->d = &op->done;
    w->next = l->subs;
    l->subs = w;
    advance(sh, l, true);
}

/* The ops queued while a commit was in flight, until one commits. */
static void
ops_drain(shard *sh, tc_live *l)
{
    while (l->ops != NULL && !l->writing) {
        tc_op *op = l->ops;
        if ((l->ops = op->next) == NULL)
            l->ops_tail = NULL;
        op_apply(sh, l, op);
    }
}

static void
written(shard *sh, tc_live *l, troupe_err err, bool insert)
{
    l->writing = false;
    if (insert && err == TROUPE_EEXIST) {
        live_free(sh, l, TROUPE_OK); /* stored already: nothing twice */
        return;
    }
    if (insert && err != TROUPE_OK) {
        live_free(sh, l, err);
        return;
    }
    /* a change whose commit failed stays in memory and is committed again
     * later: its callers cannot be told it did not happen */
    reply_subs(l, err == TROUPE_OK ? TROUPE_OK : TROUPE_EUNKNOWN);
    if (err != TROUPE_OK) {
        troupe_log(troupe_runtime_logger(sh->c->rt), TROUPE_LOG_WARN, "coord",
                   "gtx %.*s: commit failed (%s): tried again later",
                   (int)l->gid_len, l->gid, troupe_err_name(err));
        l->write_failed = true;
        l->g->due_ms = troupe__coord_now(sh->c) + sh->c->retry_min_ms;
        arm(sh, l->g->due_ms);
        return;
    }
    /* the calls planned go (one that cannot counts as UNKNOWN and may
     * commit again); then the outcomes heard meanwhile */
    tc_ref run[TROUPE_GTX_STEPS_MAX];
    uint32_t n_run = l->n_run;
    memcpy(run, l->run, n_run * sizeof(run[0]));
    l->n_run = 0;
    for (uint32_t i = 0; i < n_run; i++)
        dispatch(sh, l, run[i]);
    if (!l->writing)
        hear_kept(sh, l);
    if (l->writing)
        return;
    if (troupe__gtx_final(l->g)) {
        live_free(sh, l, TROUPE_OK);
        return;
    }
    ops_drain(sh, l);
    if (!l->writing)
        arm(sh, l->g->due_ms);
}

static tc_live *
live_new(shard *sh, tc_gtx *g, const char *gid, size_t len)
{
    tc_live *l = troupe_calloc(1, sizeof(*l));
    if (l == NULL)
        return NULL;
    l->g = g;
    l->gid_len = len;
    memcpy(l->gid, gid, len);
    l->next = sh->lives;
    sh->lives = l;
    return l;
}

/* ---- handlers ---- */

/* Answers a submit that hands nothing to a live transaction. */
static void
submit_answer(tc_submit *sub, troupe_err e)
{
    troupe__gtx_free(sub->g);
    sub->g = NULL;
    sub->done.fn(&sub->done, e);
}

static troupe_err
h_submit(troupe_actor *self, void *state, const troupe_msg *m)
{
    (void)self;
    shard *sh = state;
    tc_submit *sub = m->ptr;
    tc_live *l = find(sh, sub->gid, sub->gid_len);
    if (l != NULL && l->subs == NULL) { /* live: nothing twice */
        submit_answer(sub, TROUPE_OK);
        return TROUPE_OK;
    }
    tc_waiter *w = troupe_calloc(1, sizeof(*w));
    if (w == NULL) {
        submit_answer(sub, TROUPE_ENOMEM);
        return TROUPE_OK;
    }
    w->d = &sub->done;
    if (l != NULL) { /* its first commit is in flight: hear its outcome */
        troupe__gtx_free(sub->g);
        sub->g = NULL;
        w->next = l->subs;
        l->subs = w;
        return TROUPE_OK;
    }
    l = live_new(sh, sub->g, sub->gid, sub->gid_len);
    if (l == NULL) {
        troupe_free(w);
        submit_answer(sub, TROUPE_ENOMEM);
        return TROUPE_OK;
    }
    sub->g = NULL;
    l->subs = w;
    tc_plan p;
    troupe__gtx_plan(l->g, troupe__coord_now(sh->c), &p);
    l->n_run = p.n_run;
    memcpy(l->run, p.run, p.n_run * sizeof(p.run[0]));
    write(sh, l, true);
    return TROUPE_OK;
}

/* A call in flight when the process stopped has no committed outcome:
 * it runs again (the barrier makes it once). */
static void
interrupted(tc_call *c)
{
    if (c->target != NULL && c->state == TC_DOING)
        c->state = TC_TODO;
}

static troupe_err
h_load(troupe_actor *self, void *state, const troupe_msg *m)
{
    (void)self;
    shard *sh = state;
    tc_load *ld = m->ptr; /* ours now */
    tc_gtx *g = ld->g;
    char gid[TROUPE_GID_MAX];
    size_t gid_len = ld->gid_len;
    memcpy(gid, ld->gid, gid_len);
    troupe_free(ld);
    for (uint32_t i = 0; i < g->n_steps; i++)
        for (unsigned o = 0; o < TROUPE_GTX_OPS_MAX; o++)
            interrupted(&g->steps[i].call[o]);
    interrupted(&g->query);
    if (g->hold == TC_HOLD_DIVERGED) /* the code may be fixed: run again */
        g->hold = TC_HOLD_NONE;
    tc_live *l =
        find(sh, gid, gid_len) == NULL ? live_new(sh, g, gid, gid_len) : NULL;
    if (l == NULL) {
        troupe__gtx_free(g);
        return TROUPE_OK;
    }
    advance(sh, l, true);
    return TROUPE_OK;
}

/* The gid after a fixed head of hl bytes; NULL for a short body. */
static tc_live *
live_of(shard *sh, const troupe_msg *m, size_t hl)
{
    size_t n = troupe_msg_len(m);
    if (n <= hl)
        return NULL;
    return find(sh, (const uint8_t *)troupe_msg_data(m) + hl, n - hl);
}

static troupe_err
h_written(troupe_actor *self, void *state, const troupe_msg *m)
{
    (void)self;
    shard *sh = state;
    tc_live *l = live_of(sh, m, 5);
    if (l == NULL || !l->writing)
        return TROUPE_OK;
    const uint8_t *d = troupe_msg_data(m);
    int32_t e;
    memcpy(&e, d, 4);
    written(sh, l, (troupe_err)e, d[4] != 0);
    return TROUPE_OK;
}

static troupe_err
h_outcome(troupe_actor *self, void *state, const troupe_msg *m)
{
    (void)self;
    shard *sh = state;
    tc_live *l = live_of(sh, m, 12);
    if (l == NULL)
        return TROUPE_OK;
    uint32_t head[3];
    memcpy(head, troupe_msg_data(m), sizeof(head));
    tc_flight *f = flight_of(l, head[0], head[1]);
    if (f == NULL || f->waiting || f->heard || f->asked)
        return TROUPE_OK;
    hear(sh, l, f, (troupe_outcome)head[2]);
    return TROUPE_OK;
}

/* An actor target's reply (or the runtime's error reply for its ask). */
static troupe_err
h_reply(troupe_actor *self, void *state, const troupe_msg *m)
{
    (void)self;
    shard *sh = state;
    for (tc_live *l = sh->lives; l != NULL; l = l->next)
        for (tc_flight *f = l->flights; f != NULL; f = f->next)
            if (f->asked && !f->heard && f->corr == m->corr) {
                hear(sh, l, f, troupe__branch_reply_outcome(m));
                return TROUPE_OK;
            }
    return TROUPE_OK; /* late: its transaction ended or moved on */
}

/* A workflow run's outcome and reply (post_run). */
static troupe_err
h_wfrun(troupe_actor *self, void *state, const troupe_msg *m)
{
    (void)self;
    shard *sh = state;
    size_t n = troupe_msg_len(m);
    const uint8_t *d = troupe_msg_data(m);
    uint32_t head[2];
    if (n < 8)
        return TROUPE_OK;
    memcpy(head, d, 8);
    if (head[1] == 0 || head[1] > TROUPE_GID_MAX || n < 8 + (size_t)head[1])
        return TROUPE_OK;
    tc_live *l = find(sh, d + 8, head[1]);
    tc_flight *f = l != NULL ? flight_of(l, TC_QUERY, 0) : NULL;
    if (f == NULL || f->waiting || f->heard || !is_run(l->g, f->ref))
        return TROUPE_OK;
    size_t at = 8 + (size_t)head[1];
    hear_body(sh, l, f, (troupe_outcome)head[0], d + at, n - at);
    return TROUPE_OK;
}

static troupe_err
h_kick(troupe_actor *self, void *state, const troupe_msg *m)
{
    (void)self;
    shard *sh = state;
    tc_live *l = live_of(sh, m, 8);
    if (l == NULL)
        return TROUPE_OK;
    uint32_t head[2];
    memcpy(head, troupe_msg_data(m), sizeof(head));
    tc_flight *f = flight_of(l, head[0], head[1]);
    if (f == NULL || !f->waiting)
        return TROUPE_OK;
    troupe_target *t = f->t;
    if (!troupe__target_credit_take(t, &f->cw))
        return TROUPE_OK; /* queued again: the next kick */
    f->waiting = false;
    f->t = NULL;
    submit_task(sh, l, f, t);
    return TROUPE_OK;
}

static troupe_err
h_timer(troupe_actor *self, void *state, const troupe_msg *m)
{
    (void)self;
    (void)m;
    shard *sh = state;
    sh->armed = false;
    int64_t now = troupe__coord_now(sh->c), next = 0;
    tc_live *l = sh->lives;
    while (l != NULL) {
        tc_live *after = l->next; /* l may be freed below */
        bool b = busy(l);
        if (!b && l->g->due_ms > 0 && now >= l->g->due_ms) {
            if (l->write_failed) {
                l->write_failed = false;
                write(sh, l, false);
            } else {
                advance(sh, l, false);
            }
        } else if (!b && l->g->due_ms > 0 &&
                   (next == 0 || l->g->due_ms < next)) {
            next = l->g->due_ms;
        }
        l = after;
    }
    arm(sh, next);
    return TROUPE_OK;
}

static troupe_err
h_op(troupe_actor *self, void *state, const troupe_msg *m)
{
    (void)self;
    shard *sh = state;
    tc_op *op = m->ptr; /* the caller's, until released */
    tc_live *l = find(sh, op->gid, op->gid_len);
    if (l == NULL) { /* final or unknown: the caller reads which */
        op->done.fn(&op->done, TROUPE_ENOENT);
        return TROUPE_OK;
    }
    if (l->writing || l->ops != NULL) {
        op->next = NULL;
        if (l->ops_tail != NULL)
            l->ops_tail->next = op;
        else
            l->ops = op;
        l->ops_tail = op;
        return TROUPE_OK;
    }
    op_apply(sh, l, op);
    return TROUPE_OK;
}

static troupe_err
init(troupe_actor *self, void *state, void *arg)
{
    shard *sh = state;
    sh->c = arg;
    sh->self = self;
    return TROUPE_OK;
}

/* Stopping: what waits for credit unwaits, submitters still waiting hear
 * EUNKNOWN (their first commit may land yet), the live state goes. */
static void
stop(troupe_actor *self, void *state, troupe_err reason)
{
    (void)self;
    (void)reason;
    shard *sh = state;
    while (sh->lives != NULL)
        live_free(sh, sh->lives, TROUPE_EUNKNOWN);
}

static const troupe_handler_fn handlers[TC_K_N] = {
    [TC_K_SUBMIT] = h_submit,   [TC_K_LOAD] = h_load,
    [TC_K_WRITTEN] = h_written, [TC_K_OUTCOME] = h_outcome,
    [TC_K_KICK] = h_kick,       [TC_K_TIMER] = h_timer,
    [TC_K_OP] = h_op,           [TC_K_REPLY] = h_reply,
    [TC_K_WFRUN] = h_wfrun};

static const troupe_actor_def shard_def = {.name = "coord_shard",
                                           .state_size = sizeof(shard),
                                           .init = init,
                                           .stop = stop,
                                           .handlers = handlers,
                                           .n_handlers = TC_K_N};

troupe_err
troupe__coord_shard_spawn(troupe_coord *c, uint32_t i, troupe_addr *out)
{
    troupe_spawn_opts so = TROUPE_SPAWN_OPTS_INIT;
    so.arg = c;
    (void)i;
    return troupe_actor_spawn(c->rt, &shard_def, &so, out);
}
