/*
 * A workflow function's side of a run (troupe/workflow.h): the callback
 * target that runs it and the troupe_wf_* calls it makes. A run's task
 * body is [input, records] (wfrun.c's troupe__gtx_wf_task_body); the
 * function replays over the records, and what it recorded anew and how
 * it ended go back as the reply [end, reason, updates(, awaited)], which
 * the shard applies whole or not at all (troupe__gtx_wf_apply).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "troupe/alloc.h"
#include "troupe/internal/gtx.h"
#include "troupe/pack.h"
#include "troupe/workflow.h"

/* A record of the run's body, pointing into it. */
typedef struct wf_rec {
    uint32_t kind, state;
    const char *name;
    size_t name_len;
    const uint8_t *result;
    size_t result_len;
    int64_t version;
} wf_rec;

/* A buffer the run returned to the function (a result of an action run
 * now), freed with the run. */
typedef struct wf_buf {
    struct wf_buf *next;
    size_t len;
    uint8_t data[];
} wf_buf;

struct troupe_wf {
    char gid[TROUPE_GID_MAX + 1];
    size_t gid_len;
    const wf_rec *recs;
    uint32_t n_recs;
    uint32_t pos;     /* the next position */
    tc_wf_end stop;   /* 0 while the function may go on */
    uint32_t awaited; /* stop AWAIT: the awakeable's position */
    /* stop DIVERGED: where; a FAILURE: the function's reason, if any */
    char reason[TROUPE_GTX_ABORT_REASON_MAX + 1];
    /* the updates, packed one after the other: update i is
     * upd[at[i], at[i + 1]) (at most one verdict and the records) */
    troupe_packer upd;
    uint32_t n_upd;
    size_t at[TROUPE_GTX_STEPS_MAX + 2];
    bool in_action;
    uint8_t *res; /* the action's result, set by troupe_wf_result_set */
    size_t res_len;
    wf_buf *bufs;
};

struct troupe_workflow {
    troupe_target *t;
    troupe_wf_fn fn;
    void *arg;
    /* runs inside fn: a stopped target no longer waits for one past its
     * deadline, destroy does */
    _Atomic int running;
};

/* ---- the records and the reply ---- */

/* The header's gid: "workflow\0gid\0" "00\0run\0". */
static bool
header_gid(const troupe_task *t, troupe_wf *wf)
{
    const char *h = (const char *)t->header, *end = h + t->header_len;
    size_t ml = strnlen(h, t->header_len);
    if (ml == t->header_len || strcmp(h, "workflow") != 0)
        return false;
    const char *gid = h + ml + 1;
    size_t gl = strnlen(gid, (size_t)(end - gid));
    if (gid + gl == end || !troupe_gid_valid(gid, gl))
        return false;
    memcpy(wf->gid, gid, gl);
    wf->gid[gl] = '\0';
    wf->gid_len = gl;
    return true;
}

/* The body's input and records (*recs the caller's to free). */
static troupe_err
body_read(const troupe_task *t, const uint8_t **input, size_t *input_len,
          wf_rec **recs, uint32_t *n)
{
    troupe_reader r;
    troupe_reader_init(&r, t->body, t->body_len);
    const void *in = NULL;
    troupe_read_array_n(&r, 2);
    troupe_read_bin(&r, TROUPE_GTX_PAYLOAD_MAX, &in, input_len);
    troupe_read_array(&r, n);
    if (r.err != TROUPE_OK || *n > TROUPE_GTX_STEPS_MAX)
        return TROUPE_EPROTO;
    *input = in;
    *recs = troupe_calloc(*n > 0 ? *n : 1, sizeof(**recs));
    if (*recs == NULL)
        return TROUPE_ENOMEM;
    for (uint32_t i = 0; i < *n; i++) {
        wf_rec *k = &(*recs)[i];
        const void *res = NULL;
        troupe_read_array_n(&r, 5);
        troupe_read_u32(&r, &k->kind);
        troupe_read_str(&r, TROUPE_WF_NAME_MAX, &k->name, &k->name_len);
        troupe_read_u32(&r, &k->state);
        troupe_read_bin(&r, TROUPE_GTX_PAYLOAD_MAX, &res, &k->result_len);
        troupe_read_int(&r, &k->version);
        k->result = res;
    }
    return troupe_read_end(&r) == TROUPE_OK ? TROUPE_OK : TROUPE_EPROTO;
}

/* Appends an update (compensate NULL: none). */
static void
upd_add(troupe_wf *wf, uint32_t pos, tc_wf_kind kind, const char *name,
        tc_state state, const void *result, size_t len,
        const troupe_gtx_call *compensate, int32_t version)
{
    troupe_packer *p = &wf->upd;
    troupe_pack_array(p, 7);
    troupe_pack_uint(p, pos);
    troupe_pack_uint(p, (uint64_t)kind);
    troupe_pack_cstr(p, name);
    troupe_pack_uint(p, (uint64_t)state);
    troupe_pack_bin(p, result, len);
    if (compensate != NULL && compensate->target != NULL) {
        troupe_pack_array(p, 2);
        troupe_pack_cstr(p, compensate->target);
        troupe_pack_bin(p, compensate->payload, compensate->payload_len);
    } else {
        troupe_pack_nil(p);
    }
    troupe_pack_int(p, version);
    size_t n = 0;
    (void)troupe_pack_data(p, &n);
    wf->at[++wf->n_upd] = n;
}

static const char *
kind_name(uint32_t k)
{
    return k == TC_WF_STEP    ? "step"
           : k == TC_WF_AWAKE ? "awakeable"
                              : "version marker";
}

/* Stops the run: the function must return now. */
static troupe_err
stop_at(troupe_wf *wf, tc_wf_end why)
{
    if (wf->stop == 0)
        wf->stop = why;
    return TROUPE_EAGAIN;
}

/* The record at the next position is not a `kind` named name: the run
 * left the recorded path. */
static troupe_err
diverged(troupe_wf *wf, const wf_rec *k, uint32_t kind, const char *name)
{
    snprintf(wf->reason, sizeof(wf->reason),
             "replay diverged: position %02u was recorded as %s \"%.*s\" but "
             "is now %s \"%.40s\"",
             (unsigned)wf->pos + 1, kind_name(k->kind),
             (int)(k->name_len > 40 ? 40 : k->name_len), k->name,
             kind_name(kind), name);
    return stop_at(wf, TC_WF_DIVERGED);
}

static bool
name_ok(const char *name)
{
    size_t n = name != NULL ? strlen(name) : 0;
    return n > 0 && n <= TROUPE_WF_NAME_MAX;
}

static bool
same(const wf_rec *k, uint32_t kind, const char *name)
{
    return k->kind == kind && k->name_len == strlen(name) &&
           memcmp(k->name, name, k->name_len) == 0;
}

/* A compensation's form: a target name of 1..255 bytes that is a
 * dispatch target's name or a well-formed actor target, a payload within
 * its limit. (Whether the target exists is the coordinator's: a missing
 * one is retried when the compensation runs.) */
static bool
compensate_ok(const troupe_gtx_call *c)
{
    if (c == NULL || c->target == NULL)
        return true;
    size_t n = strlen(c->target);
    tc_actor_target at;
    return n > 0 && n <= TROUPE_TARGET_NAME_MAX &&
           (c->payload != NULL || c->payload_len == 0) &&
           c->payload_len <= TROUPE_GTX_PAYLOAD_MAX &&
           troupe__actor_target_parse(c->target, &at) >= 0;
}

/* ---- inside a run ---- */

const char *
troupe_wf_gid(const troupe_wf *wf, size_t *len)
{
    if (len != NULL)
        *len = wf != NULL ? wf->gid_len : 0;
    return wf != NULL ? wf->gid : NULL;
}

troupe_err
troupe_wf_result_set(troupe_wf *wf, const void *data, size_t len)
{
    if (wf == NULL || !wf->in_action || (data == NULL && len > 0))
        return TROUPE_EINVAL;
    if (len > TROUPE_GTX_PAYLOAD_MAX)
        return TROUPE_ETOOBIG;
    uint8_t *d = troupe_malloc(len > 0 ? len : 1);
    if (d == NULL)
        return TROUPE_ENOMEM;
    if (len > 0)
        memcpy(d, data, len);
    troupe_free(wf->res);
    wf->res = d;
    wf->res_len = len;
    return TROUPE_OK;
}

troupe_err
troupe_wf_reason_set(troupe_wf *wf, const char *reason)
{
    size_t n = reason != NULL ? strlen(reason) : 0;
    if (wf == NULL || wf->in_action ||
        !troupe_gtx_abort_reason_valid(reason, n))
        return TROUPE_EINVAL;
    if (wf->stop == 0) /* a diverged run keeps where */
        memcpy(wf->reason, reason, n + 1);
    return TROUPE_OK;
}

static void
out_set(const uint8_t **p, size_t *len, const uint8_t *v, size_t n)
{
    if (p != NULL)
        *p = v;
    if (len != NULL)
        *len = n;
}

/* Runs the action of the registered step at wf->pos. */
static troupe_err
step_run(troupe_wf *wf, const char *name, troupe_wf_action action, void *arg,
         const uint8_t **result, size_t *len)
{
    char bid[8];
    snprintf(bid, sizeof(bid), "%02u", (unsigned short)(wf->pos + 1));
    wf->in_action = true;
    wf->res = NULL;
    wf->res_len = 0;
    troupe_outcome o = action(wf, bid, arg);
    wf->in_action = false;
    wf_buf *b = troupe_malloc(sizeof(*b) + wf->res_len + 1);
    if (b == NULL) {
        troupe_free(wf->res);
        return stop_at(wf, TC_WF_RETRY); /* nothing recorded: again */
    }
    b->len = wf->res_len;
    if (wf->res_len > 0)
        memcpy(b->data, wf->res, wf->res_len);
    troupe_free(wf->res);
    wf->res = NULL;
    b->next = wf->bufs;
    wf->bufs = b;
    uint32_t pos = wf->pos++;
    if (o == TROUPE_OUTCOME_SUCCESS || o == TROUPE_OUTCOME_FAILURE) {
        bool ok = o == TROUPE_OUTCOME_SUCCESS;
        upd_add(wf, pos, TC_WF_STEP, name, ok ? TC_DONE : TC_REFUSED, b->data,
                b->len, NULL, 0);
        out_set(result, len, b->data, b->len);
        return ok ? TROUPE_OK : TROUPE_EFAILED;
    }
    /* ONGOING or UNKNOWN: the attempt counts, the run goes again later */
    upd_add(wf, pos, TC_WF_STEP, name, TC_TODO, NULL, 0, NULL, 0);
    return stop_at(wf, TC_WF_RETRY);
}

troupe_err
troupe_wf_step(troupe_wf *wf, const char *name,
               const troupe_gtx_call *compensate, troupe_wf_action action,
               void *arg, const uint8_t **result, size_t *len)
{
    out_set(result, len, NULL, 0);
    if (wf == NULL)
        return TROUPE_EINVAL;
    if (wf->stop != 0)
        return TROUPE_EAGAIN;
    if (wf->in_action || !name_ok(name) || action == NULL ||
        !compensate_ok(compensate))
        return TROUPE_EINVAL;
    if (wf->pos >= wf->n_recs) { /* new: registered first */
        if (wf->pos >= TROUPE_GTX_STEPS_MAX)
            return TROUPE_EINVAL;
        upd_add(wf, wf->pos++, TC_WF_STEP, name, TC_TODO, NULL, 0, compensate,
                0);
        return stop_at(wf, TC_WF_CONTINUE);
    }
    const wf_rec *k = &wf->recs[wf->pos];
    if (!same(k, TC_WF_STEP, name))
        return diverged(wf, k, TC_WF_STEP, name);
    if (k->state == TC_TODO)
        return step_run(wf, name, action, arg, result, len);
    wf->pos++;
    out_set(result, len, k->result, k->result_len);
    return k->state == TC_DONE ? TROUPE_OK : TROUPE_EFAILED;
}

troupe_err
troupe_wf_awakeable(troupe_wf *wf, const char *name,
                    char id[TROUPE_AWAKEABLE_ID_MAX + 1])
{
    if (wf == NULL || id == NULL)
        return TROUPE_EINVAL;
    id[0] = '\0';
    if (wf->stop != 0)
        return TROUPE_EAGAIN;
    if (wf->in_action || !name_ok(name))
        return TROUPE_EINVAL;
    if (wf->pos >= wf->n_recs) {
        if (wf->pos >= TROUPE_GTX_STEPS_MAX)
            return TROUPE_EINVAL;
        upd_add(wf, wf->pos++, TC_WF_AWAKE, name, TC_TODO, NULL, 0, NULL, 0);
        return stop_at(wf, TC_WF_CONTINUE);
    }
    const wf_rec *k = &wf->recs[wf->pos];
    if (!same(k, TC_WF_AWAKE, name))
        return diverged(wf, k, TC_WF_AWAKE, name);
    snprintf(id, TROUPE_AWAKEABLE_ID_MAX + 1, "%s/%02u", wf->gid,
             (unsigned)(wf->pos + 1) % 10000u); /* pos < 64 */
    wf->pos++;
    return TROUPE_OK;
}

troupe_err
troupe_wf_await(troupe_wf *wf, const char *id, const uint8_t **payload,
                size_t *len)
{
    out_set(payload, len, NULL, 0);
    if (wf == NULL || id == NULL)
        return TROUPE_EINVAL;
    if (wf->stop != 0)
        return TROUPE_EAGAIN;
    const char *slash = strrchr(id, '/');
    if (slash == NULL || (size_t)(slash - id) != wf->gid_len ||
        memcmp(id, wf->gid, wf->gid_len) != 0 ||
        !troupe_branch_id_valid(slash + 1))
        return TROUPE_ENOENT;
    uint32_t pos = (uint32_t)strtoul(slash + 1, NULL, 10) - 1;
    if (pos >= wf->n_recs || wf->recs[pos].kind != TC_WF_AWAKE)
        return TROUPE_ENOENT;
    const wf_rec *k = &wf->recs[pos];
    if (k->state == TC_TODO) {
        wf->awaited = pos;
        return stop_at(wf, TC_WF_AWAIT);
    }
    out_set(payload, len, k->result, k->result_len);
    return k->state == TC_DONE ? TROUPE_OK : TROUPE_EFAILED;
}

troupe_err
troupe_wf_version(troupe_wf *wf, const char *change, int32_t min, int32_t max,
                  int32_t *version)
{
    if (wf == NULL || version == NULL)
        return TROUPE_EINVAL;
    *version = TROUPE_WF_VERSION_DEFAULT;
    if (wf->stop != 0)
        return TROUPE_EAGAIN;
    if (wf->in_action || !name_ok(change) || min > max)
        return TROUPE_EINVAL;
    int64_t v = TROUPE_WF_VERSION_DEFAULT;
    uint32_t at = wf->pos + 1;   /* the position, as branch ids count */
    if (wf->pos >= wf->n_recs) { /* first time here: the newest path */
        if (wf->pos >= TROUPE_GTX_STEPS_MAX)
            return TROUPE_EINVAL;
        upd_add(wf, wf->pos++, TC_WF_VERSION, change, TC_DONE, NULL, 0, NULL,
                max);
        v = max;
    } else if (same(&wf->recs[wf->pos], TC_WF_VERSION, change)) {
        v = wf->recs[wf->pos++].version;
    } /* else older than the marker: the default, no position taken */
    if (v < min || v > max) {
        snprintf(wf->reason, sizeof(wf->reason),
                 "replay diverged: version marker \"%.40s\" at position %02u "
                 "is version %lld, outside %d..%d",
                 change, (unsigned)at, (long long)v, (int)min, (int)max);
        return stop_at(wf, TC_WF_DIVERGED);
    }
    *version = (int32_t)v;
    return TROUPE_OK;
}

/* ---- the target ---- */

/* The reply: [end, reason|nil, updates(, awaited)]. */
static troupe_err
reply_set(troupe_wf *wf, tc_wf_end end, troupe_task_reply *r)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, end == TC_WF_AWAIT ? 4 : 3);
    troupe_pack_uint(&p, (uint64_t)end);
    if (end == TC_WF_DIVERGED || (end == TC_WF_FAILED && wf->reason[0]))
        troupe_pack_cstr(&p, wf->reason);
    else
        troupe_pack_nil(&p);
    troupe_err e = troupe_pack_array(&p, wf->n_upd);
    size_t ul = 0;
    const uint8_t *u = troupe_pack_data(&wf->upd, &ul);
    for (uint32_t i = 0; i < wf->n_upd && e == TROUPE_OK; i++)
        e = u != NULL
                ? troupe_pack_raw(&p, u + wf->at[i], wf->at[i + 1] - wf->at[i])
                : TROUPE_ENOMEM;
    if (end == TC_WF_AWAIT)
        e = troupe_pack_uint(&p, wf->awaited);
    size_t n = 0;
    const void *d = troupe_pack_data(&p, &n);
    if (e == TROUPE_OK)
        e = d != NULL ? troupe_task_reply_set(r, d, n) : TROUPE_ENOMEM;
    troupe_pack_fini(&p);
    return e;
}

/* A run: the body read, the function called, its reply set. A task that
 * is not a run, or a body that breaks its format, is UNKNOWN: the
 * coordinator tries again later, never rolls back. */
static troupe_outcome
run(const troupe_task *t, troupe_task_reply *r, void *arg)
{
    troupe_workflow *w = arg;
    atomic_fetch_add(&w->running, 1);
    troupe_wf *wf = troupe_calloc(1, sizeof(*wf));
    if (wf == NULL) {
        atomic_fetch_sub(&w->running, 1);
        return TROUPE_OUTCOME_UNKNOWN;
    }
    troupe_pack_init(&wf->upd);
    wf_rec *recs = NULL;
    const uint8_t *input = NULL;
    size_t input_len = 0;
    troupe_outcome out = TROUPE_OUTCOME_UNKNOWN;
    if (t->kind == TROUPE_TASK_WORKFLOW && header_gid(t, wf) &&
        body_read(t, &input, &input_len, &recs, &wf->n_recs) == TROUPE_OK) {
        wf->recs = recs;
        troupe_outcome o = w->fn(wf, input, input_len, w->arg);
        tc_wf_end end = wf->stop != 0                 ? wf->stop
                        : o == TROUPE_OUTCOME_SUCCESS ? TC_WF_SUCCEEDED
                        : o == TROUPE_OUTCOME_FAILURE ? TC_WF_FAILED
                                                      : TC_WF_RETRY;
        if (reply_set(wf, end, r) == TROUPE_OK)
            out = TROUPE_OUTCOME_SUCCESS;
    }
    troupe_free(recs);
    while (wf->bufs != NULL) {
        wf_buf *b = wf->bufs;
        wf->bufs = b->next;
        troupe_free(b);
    }
    troupe_pack_fini(&wf->upd);
    troupe_free(wf);
    atomic_fetch_sub(&w->running, 1);
    return out;
}

troupe_err
troupe_workflow_create(troupe_runtime *rt, const troupe_workflow_def *d,
                       troupe_workflow **out)
{
    if (rt == NULL || d == NULL || d->fn == NULL || out == NULL)
        return TROUPE_EINVAL;
    troupe_workflow *w = troupe_calloc(1, sizeof(*w));
    if (w == NULL)
        return TROUPE_ENOMEM;
    w->fn = d->fn;
    w->arg = d->arg;
    troupe_target_opts o = {.name = d->name,
                            .fn = run,
                            .arg = w,
                            .credit = d->credit,
                            .timeout_ms = d->timeout_ms};
    troupe_err e = troupe_target_create(rt, &o, &w->t);
    if (e != TROUPE_OK) {
        troupe_free(w);
        return e;
    }
    *out = w;
    return TROUPE_OK;
}

troupe_err
troupe_workflow_stop_wait(troupe_workflow *w)
{
    return w != NULL ? troupe_target_stop_wait(w->t) : TROUPE_EINVAL;
}

void
troupe_workflow_destroy(troupe_workflow *w)
{
    if (w == NULL)
        return;
    troupe_target_destroy(w->t);
    struct timespec ms = {0, 1000000};
    while (atomic_load(&w->running) > 0) /* a run past its deadline */
        nanosleep(&ms, NULL);
    troupe_free(w);
}
