/*
 * The admin endpoint's global-transaction routes: what `troupe gtx ...`
 * shows, and the operator's calls on the node's coordinator
 * (troupe/coordinator.h, docs/coordinator.md).
 *
 *   GET  /v1/gtx?status=&mode=&limit=&after=  a page in gid order, cursor
 *   GET  /v1/gtx/{gid}                 one transaction's committed state,
 *                                      its next due time and its branches
 *   POST /v1/gtx/{gid}/abort           it starts aborting; body: none, or
 *                                      {"reason": "..."}
 *   POST /v1/gtx/{gid}/retry           its call waiting out a backoff runs
 *   POST /v1/gtx/{gid}/force-stop      it fails now, nothing more runs
 *   GET  /v1/xa?limit=&after=          the xids prepared on the node's
 *                                      tables (troupe/xa.h), with ages
 *
 * A gid (in the path, or as the cursor) that breaks the rule of
 * troupe/coord.h is 400 before the coordinator is asked, so a 404 always
 * means a well-formed gid the table does not hold; so is an abort reason
 * that breaks its rule, or a body with any other field (a misspelt
 * "reason" would otherwise abort with none). retry and force-stop take
 * no body (one sent is ignored, as the queue's pause ignores one). Each
 * POST answers what show answers, read after its change committed.
 */
#include <stdlib.h>
#include <string.h>

#include "admin_route.h"
#include "troupe/coord.h"
#include "troupe/xa.h"

/* The status names of the stored format (docs/coordinator.md), by value. */
static const char *const status_names[] = {[TROUPE_GTX_PREPARED] = "prepared",
                                           [TROUPE_GTX_SUBMITTED] = "submitted",
                                           [TROUPE_GTX_ABORTING] = "aborting",
                                           [TROUPE_GTX_SUCCEED] = "succeed",
                                           [TROUPE_GTX_FAILED] = "failed"};

const char *
admin_gtx_status_name(troupe_gtx_status s)
{
    return s >= TROUPE_GTX_PREPARED && s <= TROUPE_GTX_FAILED ? status_names[s]
                                                              : "unknown";
}

troupe_gtx_status
admin_gtx_status_of(const char *s)
{
    for (int i = TROUPE_GTX_PREPARED; i <= TROUPE_GTX_FAILED; i++)
        if (strcmp(status_names[i], s) == 0)
            return (troupe_gtx_status)i;
    return 0;
}

static bool
have_coord(const admin_ctx *c, admin_call *call)
{
    if (c->coord != NULL)
        return true;
    admin_error(call, 404, "not_found", "this node runs no coordinator");
    return false;
}

/* The path's gid, or false with 400 answered. */
static bool
path_gid(admin_call *call)
{
    if (troupe_gid_valid(call->param[0], call->param_len[0]))
        return true;
    admin_error(call, 400, "bad_gid",
                "'%.200s' is not a gid: 1..%d bytes of A-Z a-z 0-9 _ . : -",
                call->param[0], TROUPE_GID_MAX);
    return false;
}

static json_t *
info_json(const char *gid, const troupe_gtx_info *in)
{
    const char *mode = troupe_gtx_mode_name(in->mode);
    bool final =
        in->status == TROUPE_GTX_SUCCEED || in->status == TROUPE_GTX_FAILED;
    return json_pack(
        "{s:s,s:s?,s:s,s:o,s:I,s:I,s:o,s:I,s:o,s:I,s:o,s:o}", "gid", gid,
        "mode", mode, "status", admin_gtx_status_name(in->status), "reason",
        in->reason[0] != '\0' ? admin_json_bytes(in->reason, strlen(in->reason))
                              : json_null(),
        "steps", (json_int_t)in->steps, "attempts", (json_int_t)in->attempts,
        "created", admin_json_time(in->created_ms), "created_ms",
        (json_int_t)in->created_ms, "updated", admin_json_time(in->updated_ms),
        "updated_ms", (json_int_t)in->updated_ms, "finished",
        final ? admin_json_time(in->finished_ms) : json_null(), "finished_ms",
        final ? json_integer((json_int_t)in->finished_ms) : json_null());
}

/* A workflow's hold: why it does not run now although submitted. */
static const char *const hold_names[] = {[TROUPE_WF_RUNNABLE] = NULL,
                                         [TROUPE_WF_DIVERGED] = "diverged",
                                         [TROUPE_WF_AWAITING] = "awaiting"};

/* info_json's object, with a workflow's hold ("hold": null when it is
 * not held). */
static json_t *
info_json_full(const char *gid, const troupe_gtx_info *in)
{
    json_t *j = info_json(gid, in);
    if (j == NULL || in->mode != TROUPE_MODE_WORKFLOW)
        return j;
    const char *h =
        in->hold <= TROUPE_WF_AWAITING ? hold_names[in->hold] : "unknown";
    if (json_object_set_new(j, "hold", h ? json_string(h) : json_null()) != 0) {
        json_decref(j);
        return NULL;
    }
    return j;
}

/* The names of the stored call states and of the outcomes, by value. */
static const char *const call_state_names[] = {
    [TROUPE_GTX_CALL_TODO] = "todo",
    [TROUPE_GTX_CALL_DISPATCHED] = "dispatched",
    [TROUPE_GTX_CALL_SUCCEEDED] = "succeeded",
    [TROUPE_GTX_CALL_FAILED] = "failed"};
static const char *const outcome_names[] = {
    [TROUPE_OUTCOME_SUCCESS] = "SUCCESS",
    [TROUPE_OUTCOME_FAILURE] = "FAILURE",
    [TROUPE_OUTCOME_ONGOING] = "ONGOING",
    [TROUPE_OUTCOME_UNKNOWN] = "UNKNOWN"};

static json_t *
op_json(const troupe_gtx_op *o)
{
    bool st =
        o->state >= TROUPE_GTX_CALL_TODO && o->state <= TROUPE_GTX_CALL_FAILED;
    bool heard =
        o->last >= TROUPE_OUTCOME_SUCCESS && o->last <= TROUPE_OUTCOME_UNKNOWN;
    return json_pack("{s:s,s:o,s:I,s:s,s:I,s:s?}", "op", o->op, "target",
                     admin_json_bytes(o->target, strlen(o->target)),
                     "payload_len", (json_int_t)o->payload_len, "state",
                     st ? call_state_names[o->state] : "unknown", "attempts",
                     (json_int_t)o->attempts, "last",
                     heard ? outcome_names[o->last] : NULL);
}

/* show's answer: the info, the next due time and the branches, each with
 * its ops in the mode's order. */
static json_t *
detail_json(const char *gid, const troupe_gtx_detail *d)
{
    json_t *j = info_json_full(gid, &d->info);
    json_t *bs = json_array();
    for (size_t i = 0; j != NULL && bs != NULL && i < d->n_branches; i++) {
        const troupe_gtx_branch *b = &d->branches[i];
        json_t *ops = json_array();
        for (size_t k = 0; ops != NULL && k < b->n_ops; k++)
            if (json_array_append_new(ops, op_json(&b->ops[k])) != 0) {
                json_decref(ops);
                ops = NULL;
            }
        /* a workflow's record: its kind, name (and a marker's version) */
        json_t *bj = ops == NULL ? NULL
                     : b->kind != NULL
                         ? json_pack("{s:s,s:o,s:s,s:o,s:I}", "id", b->id,
                                     "ops", ops, "kind", b->kind, "name",
                                     admin_json_bytes(b->name, strlen(b->name)),
                                     "version", (json_int_t)b->version)
                         : json_pack("{s:s,s:o}", "id", b->id, "ops", ops);
        if (bj == NULL || json_array_append_new(bs, bj) != 0) {
            json_decref(bs);
            bs = NULL;
        }
    }
    bool due = d->next_due_ms > 0;
    if (j == NULL || bs == NULL ||
        json_object_set_new(j, "next_due",
                            due ? admin_json_time(d->next_due_ms)
                                : json_null()) != 0 ||
        json_object_set_new(j, "next_due_ms",
                            due ? json_integer((json_int_t)d->next_due_ms)
                                : json_null()) != 0) {
        json_decref(bs);
        json_decref(j);
        return NULL;
    }
    if (json_object_set_new(j, "branches", bs) != 0) { /* bs taken */
        json_decref(j);
        return NULL;
    }
    return j;
}

/* Answers show's object for gid (after an action: the state it
 * committed). */
static void
answer_detail(const admin_ctx *c, admin_call *call, const char *gid, size_t len)
{
    troupe_gtx_detail *d = NULL;
    troupe_err e = troupe_gtx_detail_wait(c->coord, gid, len, &d);
    if (e != TROUPE_OK)
        admin_fail(call, "query", e);
    else
        admin_ok(call, detail_json(gid, d));
    troupe_gtx_detail_destroy(d);
}

static void
list_route(const admin_ctx *c, admin_call *call)
{
    if (!have_coord(c, call))
        return;
    troupe_gtx_filter f = {0};
    long limit;
    if (!admin_query_num(call, "limit", 1, TROUPE_GTX_LIST_MAX, 100, &limit))
        return;
    bool bad;
    char *st = admin_query(call, "status", &bad);
    if (bad)
        return;
    if (st != NULL && (f.status = admin_gtx_status_of(st)) == 0) {
        admin_error(call, 400, "bad_query",
                    "status wants prepared, submitted, aborting, succeed or "
                    "failed, got '%.64s'",
                    st);
        free(st);
        return;
    }
    free(st);
    char *mode = admin_query(call, "mode", &bad);
    if (bad)
        return;
    if (mode != NULL && (f.mode = troupe_gtx_mode_of(mode)) == 0) {
        admin_error(call, 400, "bad_query",
                    "mode wants saga, tcc, msg, xa or workflow, got '%.64s'",
                    mode);
        free(mode);
        return;
    }
    free(mode);
    char *after = admin_query(call, "after", &bad);
    if (bad)
        return;
    if (after != NULL && !troupe_gid_valid(after, strlen(after))) {
        admin_error(call, 400, "bad_cursor",
                    "after wants the cursor a page gave (a gid)");
        free(after);
        return;
    }
    troupe_gtx_page *pg = NULL;
    troupe_err e =
        troupe_gtx_list_wait(c->coord, &f, after, (size_t)limit, &pg);
    free(after);
    if (e != TROUPE_OK) {
        admin_fail(call, "list", e);
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; arr != NULL && i < pg->n; i++) {
        json_t *it = info_json_full(pg->items[i].gid, &pg->items[i].info);
        if (it == NULL || json_array_append_new(arr, it) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    json_t *j =
        arr ? json_pack("{s:o,s:o,s:b}", "items", arr, "cursor",
                        pg->cursor[0] ? json_string(pg->cursor) : json_null(),
                        "more", pg->more)
            : NULL;
    troupe_gtx_page_destroy(pg);
    admin_ok(call, j);
}

/* GET /v1/xa?limit=&after=: the xids prepared on the node's tables (XA
 * branches, or dangling ones whose coordinator is gone), in xid order,
 * with when each was prepared and its age. */
static void
xa_route(const admin_ctx *c, admin_call *call)
{
    long limit;
    if (!admin_query_num(call, "limit", 1, TROUPE_XA_PAGE_MAX, 100, &limit))
        return;
    bool bad;
    char *after = admin_query(call, "after", &bad);
    if (bad)
        return;
    troupe_xa_page *pg = NULL;
    troupe_err e = troupe_xa_list_wait(
        c->tables, after, after ? strlen(after) : 0, (size_t)limit, &pg);
    free(after);
    if (e != TROUPE_OK) {
        admin_fail(call, "xa list", e);
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; arr != NULL && i < pg->n; i++) {
        const troupe_xa_info *x = &pg->v[i];
        json_t *it = json_pack(
            "{s:o,s:o,s:I,s:I}", "xid", admin_json_bytes(x->xid, x->xid_len),
            "prepared", admin_json_time(x->prepared_ms), "prepared_ms",
            (json_int_t)x->prepared_ms, "age_ms", (json_int_t)x->age_ms);
        if (it == NULL || json_array_append_new(arr, it) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    const troupe_xa_info *last = pg->n > 0 ? &pg->v[pg->n - 1] : NULL;
    json_t *j =
        arr ? json_pack("{s:o,s:o,s:b}", "items", arr, "cursor",
                        last ? admin_json_bytes(last->xid, last->xid_len)
                             : json_null(),
                        "more", pg->more)
            : NULL;
    troupe_xa_page_destroy(pg);
    admin_ok(call, j);
}

static void
show_route(const admin_ctx *c, admin_call *call)
{
    if (!have_coord(c, call) || !path_gid(call))
        return;
    answer_detail(c, call, call->param[0], call->param_len[0]);
}

/* An abort's body: none (no reason), or {"reason": "..."}. Returns false
 * with 400 answered; *reason is malloc'd (free it) or NULL for none. */
static bool
abort_reason(admin_call *call, char **reason)
{
    *reason = NULL;
    if (call->body_len == 0)
        return true;
    json_t *o = admin_body_object(call);
    if (o == NULL)
        return false;
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        if (strcmp(k, "reason") != 0) {
            admin_error(call, 400, "bad_field",
                        "an abort's body takes only \"reason\", not "
                        "\"%.64s\"",
                        k);
            json_decref(o);
            return false;
        }
    }
    v = json_object_get(o, "reason");
    bool ok = true;
    if (v != NULL && !json_is_null(v)) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v); /* all of it, past a NUL */
        if (s == NULL || (n > 0 && !troupe_gtx_abort_reason_valid(s, n))) {
            admin_error(call, 400, "bad_reason",
                        "field \"reason\" wants a string of at most %d "
                        "bytes of UTF-8 without control characters",
                        TROUPE_GTX_ABORT_REASON_MAX);
            ok = false;
        } else if (n > 0 && (*reason = strdup(s)) == NULL) {
            admin_error(call, 500, "no_memory", "out of memory");
            ok = false;
        }
    }
    json_decref(o);
    return ok;
}

/* What an operator's route does to one transaction. */
enum { OP_ABORT, OP_RETRY, OP_FORCE_STOP };

static void
op_route(const admin_ctx *c, admin_call *call, int what)
{
    static const char *const name[] = {"abort", "retry", "force-stop"};
    if (!have_coord(c, call) || !path_gid(call))
        return;
    const char *g = call->param[0];
    size_t n = call->param_len[0];
    char *reason = NULL;
    if (what == OP_ABORT && !abort_reason(call, &reason))
        return;
    troupe_err e =
        what == OP_ABORT   ? troupe_gtx_abort_wait(c->coord, g, n, reason)
        : what == OP_RETRY ? troupe_gtx_retry_wait(c->coord, g, n)
                           : troupe_gtx_force_stop_wait(c->coord, g, n);
    free(reason);
    if (e != TROUPE_OK)
        admin_fail(call, name[what], e);
    else
        answer_detail(c, call, g, n); /* the state the change committed */
}

static void
abort_route(const admin_ctx *c, admin_call *call)
{
    op_route(c, call, OP_ABORT);
}

static void
retry_route(const admin_ctx *c, admin_call *call)
{
    op_route(c, call, OP_RETRY);
}

static void
force_stop_route(const admin_ctx *c, admin_call *call)
{
    op_route(c, call, OP_FORCE_STOP);
}

const admin_route admin_gtx_routes[] = {
    {"GET", "/v1/gtx", list_route},
    {"GET", "/v1/gtx/{}", show_route},
    {"POST", "/v1/gtx/{}/abort", abort_route},
    {"POST", "/v1/gtx/{}/retry", retry_route},
    {"POST", "/v1/gtx/{}/force-stop", force_stop_route},
    {"GET", "/v1/xa", xa_route},
    {NULL, NULL, NULL},
};
