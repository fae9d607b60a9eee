/*
 * A workflow's rules (troupe/internal/gtx.h, docs/plans/coordinator.md
 * 5.1): the body of a run's task, what a run's reply does to the
 * document, an awakeable's resolution. Pure functions of the document
 * and the time, as machine.c's: the shard persists the document after
 * each.
 *
 * A run's reply: [end uint, reason str|nil, updates array], and with
 * end AWAIT a fourth field, the position of the awakeable awaited; an
 * update [pos uint, kind uint, name str, state uint, result bin,
 * compensate nil|[target str, payload bin], version int]. pos == the records'
 * count appends a record (a step registered TODO, an awakeable pending, a
 * version marker DONE); pos below it gives a registered step its
 * verdict (DONE or REFUSED with its result, or TODO: run, no verdict).
 * Everything is checked before anything is applied.
 */
#include <stdio.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/internal/gtx.h"

troupe_err
troupe__gtx_wf_task_body(const tc_gtx *g, troupe_packer *p)
{
    troupe_pack_array(p, 2);
    troupe_pack_bin(p, g->query.payload, g->query.payload_len);
    troupe_err e = troupe_pack_array(p, g->n_steps);
    for (uint32_t i = 0; i < g->n_steps; i++) {
        const tc_step *s = &g->steps[i];
        troupe_pack_array(p, 5);
        troupe_pack_uint(p, (uint64_t)s->kind);
        troupe_pack_cstr(p, s->name != NULL ? s->name : "");
        troupe_pack_uint(p, (uint64_t)s->call[0].state);
        troupe_pack_bin(p, s->call[0].payload, s->call[0].payload_len);
        e = troupe_pack_int(p, s->version);
    }
    return e;
}

/* One update, read and checked against g (pos, name and kind as the
 * records say); what it carries points into the reply. */
typedef struct wf_upd {
    uint32_t pos;
    uint32_t kind;
    const char *name;
    size_t name_len;
    uint32_t state;
    const void *result;
    size_t result_len;
    const char *ctarget; /* NULL: no compensation */
    size_t ctarget_len;
    const void *cpayload;
    size_t cpayload_len;
    int64_t version;
} wf_upd;

static troupe_err
read_upd(troupe_reader *r, wf_upd *u)
{
    memset(u, 0, sizeof(*u));
    troupe_read_array_n(r, 7);
    troupe_read_u32(r, &u->pos);
    troupe_read_u32(r, &u->kind);
    troupe_read_str(r, TROUPE_WF_NAME_MAX, &u->name, &u->name_len);
    troupe_read_u32(r, &u->state);
    troupe_read_bin(r, TROUPE_GTX_PAYLOAD_MAX, &u->result, &u->result_len);
    if (!troupe_read_try_nil(r)) {
        troupe_read_array_n(r, 2);
        troupe_read_str(r, TROUPE_TARGET_NAME_MAX, &u->ctarget,
                        &u->ctarget_len);
        troupe_read_bin(r, TROUPE_GTX_PAYLOAD_MAX, &u->cpayload,
                        &u->cpayload_len);
        /* a target as a call stores it: no NUL, and an actor target in
         * its form (troupe/branch.h) */
        char t[TROUPE_TARGET_NAME_MAX + 1];
        tc_actor_target at;
        if (r->err != TROUPE_OK || u->ctarget_len == 0 ||
            memchr(u->ctarget, '\0', u->ctarget_len) != NULL)
            return TROUPE_EPROTO;
        memcpy(t, u->ctarget, u->ctarget_len);
        t[u->ctarget_len] = '\0';
        if (troupe__actor_target_parse(t, &at) < 0)
            return TROUPE_EPROTO;
    }
    if (troupe_read_int(r, &u->version) != TROUPE_OK || u->name_len == 0 ||
        memchr(u->name, '\0', u->name_len) != NULL || u->kind < TC_WF_STEP ||
        u->kind > TC_WF_VERSION || u->state < TC_TODO ||
        u->state > TC_REFUSED || u->version < INT32_MIN ||
        u->version > INT32_MAX)
        return TROUPE_EPROTO;
    return TROUPE_OK;
}

/* Whether u fits g with n records so far (the updates before it
 * counted): an append at n, or a verdict for a registered step. */
static bool
upd_fits(const tc_gtx *g, uint32_t n, const wf_upd *u)
{
    if (u->pos == n) { /* a new record */
        if (n >= TROUPE_GTX_STEPS_MAX)
            return false;
        if (u->kind == TC_WF_STEP)
            return u->state == TC_TODO;
        if (u->kind == TC_WF_AWAKE)
            return u->state == TC_TODO && u->ctarget == NULL;
        return u->state == TC_DONE && u->ctarget == NULL;
    }
    if (u->pos > n || u->pos >= g->n_steps)
        return false; /* a verdict for a record appended by this reply */
    const tc_step *s = &g->steps[u->pos];
    return s->kind == TC_WF_STEP && u->kind == TC_WF_STEP &&
           s->call[0].state == TC_TODO && s->name != NULL &&
           strlen(s->name) == u->name_len &&
           memcmp(s->name, u->name, u->name_len) == 0 && u->ctarget == NULL;
}

static char *
dup_n(const void *s, size_t n, bool nul)
{
    char *d = troupe_malloc(n + (nul ? 1 : 0) + (n == 0));
    if (d != NULL) {
        memcpy(d, s, n);
        if (nul)
            d[n] = '\0';
    }
    return d;
}

/* Applies a checked u. */
static troupe_err
upd_apply(tc_gtx *g, const wf_upd *u)
{
    if (u->pos < g->n_steps) {
        tc_call *a = &g->steps[u->pos].call[0];
        uint8_t *res = NULL;
        if (u->result_len > 0 &&
            (res = (uint8_t *)dup_n(u->result, u->result_len, false)) == NULL)
            return TROUPE_ENOMEM;
        troupe_free(a->payload);
        a->payload = res;
        a->payload_len = u->result_len;
        a->state = (tc_state)u->state;
        a->attempts++;
        return TROUPE_OK;
    }
    tc_step *ns = troupe_realloc(g->steps, (g->n_steps + 1) * sizeof(*ns));
    if (ns == NULL)
        return TROUPE_ENOMEM;
    g->steps = ns;
    tc_step *s = &ns[g->n_steps];
    memset(s, 0, sizeof(*s));
    s->kind = (tc_wf_kind)u->kind;
    s->version = (int32_t)u->version;
    s->call[0].state = (tc_state)u->state;
    s->name = dup_n(u->name, u->name_len, true);
    s->call[0].target = dup_n(g->query.target, strlen(g->query.target), true);
    bool ok = s->name != NULL && s->call[0].target != NULL;
    if (ok && u->ctarget != NULL) {
        s->call[1].target = dup_n(u->ctarget, u->ctarget_len, true);
        s->call[1].state = TC_TODO;
        s->call[1].payload_len = u->cpayload_len;
        ok = s->call[1].target != NULL &&
             (u->cpayload_len == 0 ||
              (s->call[1].payload = (uint8_t *)dup_n(
                   u->cpayload, u->cpayload_len, false)) != NULL);
    }
    g->n_steps++; /* freed with g if it is half made */
    return ok ? TROUPE_OK : TROUPE_ENOMEM;
}

static void
set_reason(tc_gtx *g, const char *why, size_t n)
{
    char *r = dup_n(why, n, true);
    if (r == NULL)
        return; /* the move happens without its reason */
    troupe_free(g->reason);
    g->reason = r;
}

/* No answer, or one that does not hold: run again after the backoff. */
static void
again_later(tc_gtx *g, int64_t now)
{
    g->query.state = TC_TODO;
    g->attempts++;
    g->due_ms = now + troupe__gtx_backoff(&g->opts, g->attempts);
}

troupe_err
troupe__gtx_wf_apply(tc_gtx *g, troupe_outcome o, const void *body, size_t len,
                     int64_t now)
{
    if (g->mode != TROUPE_MODE_WORKFLOW || g->query.state != TC_DOING)
        return TROUPE_ESTATE;
    g->query.last = (uint32_t)o;
    if (g->status != TC_SUBMITTED) { /* aborted while it ran */
        g->query.state = TC_TODO;
        return TROUPE_OK;
    }
    if (o != TROUPE_OUTCOME_SUCCESS || body == NULL) {
        again_later(g, now);
        return TROUPE_OK;
    }
    /* check it all first */
    troupe_reader r;
    troupe_reader_init(&r, body, len);
    uint32_t end = 0, nu = 0, n = g->n_steps;
    const char *why = NULL;
    size_t why_len = 0;
    uint32_t fields = 0, awaited = UINT32_MAX;
    troupe_read_array(&r, &fields);
    troupe_read_u32(&r, &end);
    if (!troupe_read_try_nil(&r))
        troupe_read_str(&r, TROUPE_GTX_REASON_MAX, &why, &why_len);
    troupe_read_array(&r, &nu);
    bool ok = r.err == TROUPE_OK && end >= TC_WF_SUCCEEDED &&
              end <= TC_WF_AWAIT && nu <= TROUPE_GTX_STEPS_MAX &&
              (why == NULL || memchr(why, '\0', why_len) == NULL);
    troupe_reader start = r;
    for (uint32_t i = 0; ok && i < nu; i++) {
        wf_upd u;
        ok = read_upd(&r, &u) == TROUPE_OK && upd_fits(g, n, &u);
        n += ok && u.pos == n;
    }
    if (end == TC_WF_AWAIT) /* the awakeable awaited, at or after the
                               updates' (checked once they are applied) */
        ok = ok && fields == 4 && troupe_read_u32(&r, &awaited) == TROUPE_OK &&
             awaited < n &&
             (awaited >= g->n_steps || g->steps[awaited].kind == TC_WF_AWAKE);
    else
        ok = ok && fields == 3;
    ok = ok && troupe_read_end(&r) == TROUPE_OK;
    if (!ok) {
        again_later(g, now);
        return TROUPE_OK;
    }
    r = start;
    for (uint32_t i = 0; i < nu; i++) {
        wf_upd u;
        (void)read_upd(&r, &u);
        troupe_err e = upd_apply(g, &u);
        if (e != TROUPE_OK)
            return e;
    }
    g->query.state = TC_TODO;
    switch ((tc_wf_end)end) {
    case TC_WF_SUCCEEDED:
        g->query.state = TC_DONE;
        g->status = TC_SUCCEED;
        g->finished_ms = now > 0 ? now : 1;
        g->due_ms = 0;
        break;
    case TC_WF_FAILED:
        g->status = TC_ABORTING;
        g->due_ms = 0;
        if (g->reason == NULL)
            set_reason(g, why != NULL ? why : "workflow: FAILURE",
                       why != NULL ? why_len : strlen("workflow: FAILURE"));
        break;
    case TC_WF_CONTINUE:
        g->due_ms = 0;
        break;
    case TC_WF_RETRY:
        again_later(g, now);
        break;
    case TC_WF_DIVERGED:
        g->hold = TC_HOLD_DIVERGED;
        g->due_ms = 0;
        set_reason(g, why != NULL ? why : "replay diverged",
                   why != NULL ? why_len : strlen("replay diverged"));
        break;
    default: /* AWAIT: held while the awakeable it waits for is pending
                (one resolved while the run was in flight runs it again) */
        g->due_ms = 0;
        if (g->steps[awaited].kind != TC_WF_AWAKE) {
            again_later(g, now); /* an update made it something else */
            break;
        }
        if (g->steps[awaited].call[0].state == TC_TODO)
            g->hold = TC_HOLD_AWAIT;
        break;
    }
    return TROUPE_OK;
}

troupe_err
troupe__gtx_wf_resolve(tc_gtx *g, uint32_t pos, bool ok, const void *payload,
                       size_t len, bool *changed)
{
    *changed = false;
    if (g->mode != TROUPE_MODE_WORKFLOW || pos >= g->n_steps ||
        g->steps[pos].kind != TC_WF_AWAKE)
        return TROUPE_ENOENT;
    tc_call *a = &g->steps[pos].call[0];
    if (len > TROUPE_GTX_PAYLOAD_MAX)
        return TROUPE_EINVAL;
    if (a->state == (ok ? TC_DONE : TC_REFUSED) && a->payload_len == len &&
        (len == 0 || memcmp(a->payload, payload, len) == 0))
        return TROUPE_OK; /* the same resolution again: nothing moves */
    if (troupe__gtx_final(g) || a->state != TC_TODO)
        return TROUPE_ECONFLICT;
    uint8_t *d = NULL;
    if (len > 0 && (d = (uint8_t *)dup_n(payload, len, false)) == NULL)
        return TROUPE_ENOMEM;
    troupe_free(a->payload);
    a->payload = d;
    a->payload_len = len;
    a->state = ok ? TC_DONE : TC_REFUSED;
    if (g->hold == TC_HOLD_AWAIT) {
        g->hold = TC_HOLD_NONE;
        g->due_ms = 0;
    }
    *changed = true;
    return TROUPE_OK;
}
