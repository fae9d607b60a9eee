/*
 * The admin endpoint's global-transaction routes: what `troupe gtx ...`
 * shows, and the operator's calls on the node's coordinator
 * (troupe/coordinator.h, docs/coordinator.md).
 *
 *   GET  /v1/gtx?status=&mode=&limit=&after=  a page in gid order, cursor
 *   GET  /v1/gtx/{gid}                 one transaction's committed state
 *   POST /v1/gtx/{gid}/abort           it starts aborting
 *   POST /v1/gtx/{gid}/retry           its call waiting out a backoff runs
 *   POST /v1/gtx/{gid}/force-stop      it fails now, nothing more runs
 *
 * A gid (in the path, or as the cursor) that breaks the rule of
 * troupe/coord.h is 400 before the coordinator is asked, so a 404 always
 * means a well-formed gid the table does not hold. The POST routes take
 * no body (one sent is ignored, as the queue's pause ignores one): the
 * coordinator's operator calls take nothing but the gid, and an abort's
 * reason is the coordinator's own ("aborted").
 */
#include <stdlib.h>
#include <string.h>

#include "admin_route.h"
#include "troupe/coord.h"

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
        json_t *it = info_json(pg->items[i].gid, &pg->items[i].info);
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

static void
show_route(const admin_ctx *c, admin_call *call)
{
    if (!have_coord(c, call) || !path_gid(call))
        return;
    troupe_gtx_info in;
    troupe_err e = troupe_gtx_query_wait(c->coord, call->param[0],
                                         call->param_len[0], &in);
    if (e != TROUPE_OK)
        admin_fail(call, "query", e);
    else
        admin_ok(call, info_json(call->param[0], &in));
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
    troupe_err e = what == OP_ABORT ? troupe_gtx_abort_wait(c->coord, g, n)
                   : what == OP_RETRY
                       ? troupe_gtx_retry_wait(c->coord, g, n)
                       : troupe_gtx_force_stop_wait(c->coord, g, n);
    if (e != TROUPE_OK) {
        admin_fail(call, name[what], e);
        return;
    }
    /* the state the change committed, as show answers it */
    troupe_gtx_info in;
    if ((e = troupe_gtx_query_wait(c->coord, g, n, &in)) != TROUPE_OK)
        admin_fail(call, "query", e);
    else
        admin_ok(call, info_json(g, &in));
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
    {NULL, NULL, NULL},
};
