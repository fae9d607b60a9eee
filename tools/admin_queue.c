/*
 * The admin endpoint's queue routes: what `troupe queue ...` shows, and the
 * operator's actions on a live node's queues.
 *
 *   GET  /v1/queues                         the queues
 *   GET  /v1/queues/{q}                     counts, oldest due, lag
 *   GET  /v1/queues/{q}/pending?limit=&after=    a page, oldest due first
 *   GET  /v1/queues/{q}/completed?limit=&after=  a page
 *   GET  /v1/queues/{q}/parked?limit=&after=     parked ones, last errors
 *   GET  /v1/queues/{q}/events?id=|id_hex=  every invocation of one id
 *   POST /v1/queues/{q}/pause, /resume      delivery off / on (stored)
 *   POST /v1/queues/{q}/parked/retry  {"skey"}   a parked one pending again
 *   POST /v1/queues/{q}/parked/delete {"skey"}   a parked one deleted
 *   POST /v1/queues/{q}/retry  {"skey"}     reschedule one invocation now
 *   POST /v1/queues/{q}/ack    {"skey"}     complete one invocation
 *   POST /v1/queues/{q}/delete-by-owner {"kind", "id"}
 *
 * An invocation is named by its storage key, the "skey" (hex) every page
 * shows; cursors are the hex "cursor" of the page before. Payloads are
 * shown as JSON (admin_msgpack_to_json), with "payload_error" and the hex
 * when they do not convert.
 */
#include <stdlib.h>

#include "admin_route.h"
#include "troupe/alloc.h"

static bool
have_queues(const admin_ctx *c, admin_call *call)
{
    if (c->queues != NULL)
        return true;
    admin_error(call, 404, "not_found", "this node serves no queues");
    return false;
}

static void
list_route(const admin_ctx *c, admin_call *call)
{
    if (!have_queues(c, call))
        return;
    troupe_queue_info *info = NULL;
    size_t n = 0;
    troupe_err e = troupe_queues_list(c->queues, &info, &n);
    if (e != TROUPE_OK) {
        admin_fail(call, "list queues", e);
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; arr != NULL && i < n; i++)
        json_array_append_new(
            arr, json_pack("{s:o*,s:I,s:I,s:I,s:I,s:b}", "name",
                           admin_json_bytes(info[i].name, strlen(info[i].name)),
                           "id", (json_int_t)info[i].id, "partitions",
                           (json_int_t)info[i].partitions, "retention_ms",
                           (json_int_t)info[i].retention_ms, "max_attempts",
                           (json_int_t)info[i].max_attempts, "paused",
                           info[i].paused));
    troupe_free(info);
    admin_ok(call, json_pack("{s:o*}", "queues", arr));
}

static void
stats_route(const admin_ctx *c, admin_call *call)
{
    if (!have_queues(c, call))
        return;
    troupe_queue_stats *st = NULL;
    troupe_err e = troupe_queue_stats_wait(c->queues, call->param[0], &st);
    if (e != TROUPE_OK) {
        admin_fail(call, "queue figures", e);
        return;
    }
    int64_t lag = -1;
    if (st->oldest_due_ms >= 0) {
        lag = troupe_now_ms() - st->oldest_due_ms;
        lag = lag > 0 ? lag : 0;
    }
    json_t *parts = json_array();
    for (uint32_t p = 0; parts != NULL && p < st->partitions; p++)
        json_array_append_new(
            parts, json_pack("{s:I,s:I,s:I,s:I}", "partition", (json_int_t)p,
                             "pending", (json_int_t)st->pending_by_p[p],
                             "completed", (json_int_t)st->completed_by_p[p],
                             "parked", (json_int_t)st->parked_by_p[p]));
    json_t *j = json_pack(
        "{s:o*,s:I,s:I,s:I,s:I,s:o,s:I,s:o,s:o*}", "name",
        admin_json_bytes(call->param[0], call->param_len[0]), "partitions",
        (json_int_t)st->partitions, "pending", (json_int_t)st->pending,
        "completed", (json_int_t)st->completed, "malformed",
        (json_int_t)st->malformed, "oldest_due",
        admin_json_time(st->oldest_due_ms), "oldest_due_ms",
        (json_int_t)st->oldest_due_ms, "lag_ms",
        lag < 0 ? json_null() : json_integer(lag), "by_partition", parts);
    if (j != NULL)
        json_object_set_new(j, "parked", json_integer((json_int_t)st->parked));
    troupe_free(st);
    troupe_queue_counters qc;
    if (j != NULL && troupe_queue_counters_get(c->queues, call->param[0],
                                               &qc) == TROUPE_OK) {
        /* attempts: per bucket of the histogram, by its upper bound */
        json_t *att = json_object();
        for (unsigned i = 0; att != NULL && i <= qc.attempts.n; i++) {
            char b[24];
            if (i < qc.attempts.n)
                snprintf(
                    b, sizeof(b), "%llu",
                    (unsigned long long)troupe_hist_bound(&qc.attempts, i));
            else
                snprintf(b, sizeof(b), "more");
            json_object_set_new(
                att, b, json_integer((json_int_t)qc.attempts.counts[i]));
        }
        json_object_set_new(
            j, "handler_calls",
            json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:o*}", "delivered",
                      (json_int_t)qc.delivered, "acked", (json_int_t)qc.acked,
                      "rescheduled", (json_int_t)qc.rescheduled, "errors",
                      (json_int_t)qc.errors, "timeouts",
                      (json_int_t)qc.timeouts, "commit_failed",
                      (json_int_t)qc.commit_failed, "attempts", att));
    }
    admin_ok(call, j);
}

static json_t *
item_json(const troupe_queue_item *it)
{
    json_t *owner = json_null();
    if (it->owner_kind != NULL)
        owner =
            json_pack("{s:o*,s:o*}", "kind",
                      admin_json_bytes(it->owner_kind, it->owner_kind_len),
                      "id", admin_json_bytes(it->owner_id, it->owner_id_len));
    char *skey = admin_hex(it->skey, it->skey_len);
    json_t *j =
        json_pack("{s:s,s:s?,s:I,s:o,s:I,s:I,s:o*,s:o*,s:o*,s:I}", "state",
                  it->completed ? "completed"
                  : it->parked  ? "parked"
                                : "pending",
                  "skey", skey, "partition", (json_int_t)it->partition, "time",
                  admin_json_time(it->time_ms), "time_ms",
                  (json_int_t)it->time_ms, "order", (json_int_t)it->order, "id",
                  admin_json_bytes(it->id, it->id_len), "key",
                  admin_json_bytes(it->key, it->key_len), "owner", owner,
                  "payload_bytes", (json_int_t)it->payload_len);
    free(skey);
    if (j == NULL)
        return NULL;
    if (it->completed)
        json_object_set_new(j, "processed", admin_json_time(it->processed_ms));
    else
        json_object_set_new(j, "attempts",
                            json_integer((json_int_t)it->attempts));
    if (it->parked)
        json_object_set_new(
            j, "last_error",
            it->last_error != NULL
                ? admin_json_bytes(it->last_error, it->last_error_len)
                : json_null());
    const char *why = NULL;
    json_t *pl = admin_msgpack_to_json(it->payload, it->payload_len, &why);
    if (pl != NULL) {
        json_object_set_new(j, "payload", pl);
    } else {
        char *h = admin_hex(it->payload, it->payload_len);
        json_object_set_new(j, "payload_error", json_string(why));
        json_object_set_new(j, "payload_hex", h ? json_string(h) : json_null());
        free(h);
    }
    return j;
}

static void
answer_page(admin_call *call, troupe_queue_page *pg, bool with_cursor)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr != NULL && i < pg->n; i++) {
        json_t *it = item_json(&pg->items[i]);
        if (it == NULL || json_array_append_new(arr, it) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    json_t *j = json_pack("{s:o*}", "items", arr);
    if (j != NULL && with_cursor) {
        char *cur = pg->n ? admin_hex(pg->cursor, pg->cursor_len) : NULL;
        json_object_set_new(j, "cursor", cur ? json_string(cur) : json_null());
        json_object_set_new(j, "more", json_boolean(pg->more));
        free(cur);
    }
    admin_ok(call, arr ? j : (json_decref(j), NULL));
}

static void
page_route(const admin_ctx *c, admin_call *call, troupe_queue_state state)
{
    if (!have_queues(c, call))
        return;
    long limit;
    if (!admin_query_num(call, "limit", 1, TROUPE_QUEUE_PAGE_MAX, 100, &limit))
        return;
    bool bad;
    char *after = admin_query(call, "after", &bad);
    if (bad)
        return;
    uint8_t *cur = NULL;
    size_t cur_len = 0;
    if (after != NULL && (cur = admin_unhex(after, &cur_len)) == NULL) {
        admin_error(call, 400, "bad_query",
                    "after wants the hex cursor a page gave");
        free(after);
        return;
    }
    free(after);
    troupe_queue_page *pg = NULL;
    troupe_err e = troupe_queue_list_wait(c->queues, call->param[0], state, cur,
                                          cur_len, (size_t)limit, &pg);
    free(cur);
    if (e == TROUPE_ERANGE) {
        admin_error(call, 400, "bad_cursor",
                    "after is not a %s cursor of this queue",
                    state == TROUPE_QUEUE_PENDING     ? "pending"
                    : state == TROUPE_QUEUE_COMPLETED ? "completed"
                                                      : "parked");
        return;
    }
    if (e != TROUPE_OK) {
        admin_fail(call, "list", e);
        return;
    }
    answer_page(call, pg, true);
    troupe_queue_page_destroy(pg);
}

static void
pending_route(const admin_ctx *c, admin_call *call)
{
    page_route(c, call, TROUPE_QUEUE_PENDING);
}

static void
completed_route(const admin_ctx *c, admin_call *call)
{
    page_route(c, call, TROUPE_QUEUE_COMPLETED);
}

static void
parked_route(const admin_ctx *c, admin_call *call)
{
    page_route(c, call, TROUPE_QUEUE_PARKED);
}

static void
events_route(const admin_ctx *c, admin_call *call)
{
    if (!have_queues(c, call))
        return;
    bool bad;
    char *id = admin_query(call, "id", &bad);
    if (bad)
        return;
    char *idh = admin_query(call, "id_hex", &bad);
    if (bad) {
        free(id);
        return;
    }
    uint8_t *b = NULL;
    size_t n = 0;
    if ((id == NULL) == (idh == NULL)) {
        admin_error(call, 400, "bad_query", "give id or id_hex (one of them)");
    } else if (id != NULL) {
        n = strlen(id);
        b = (uint8_t *)id;
        id = NULL;
    } else if ((b = admin_unhex(idh, &n)) == NULL) {
        admin_error(call, 400, "bad_query", "id_hex wants hex digits");
    }
    free(id);
    free(idh);
    if (b == NULL)
        return;
    troupe_queue_page *pg = NULL;
    troupe_err e =
        n == 0 || n > TROUPE_QUEUE_ID_MAX
            ? TROUPE_EINVAL
            : troupe_queue_lookup_wait(c->queues, call->param[0], b, n, &pg);
    free(b);
    if (e != TROUPE_OK) {
        admin_fail(call, "lookup", e);
        return;
    }
    answer_page(call, pg, false);
    troupe_queue_page_destroy(pg);
}

static void
pause_route(const admin_ctx *c, admin_call *call)
{
    if (!have_queues(c, call))
        return;
    troupe_err e = troupe_queue_pause(c->queues, call->param[0]);
    if (e != TROUPE_OK)
        admin_fail(call, "pause", e);
    else
        admin_ok(call, json_pack("{s:b}", "paused", true));
}

static void
resume_route(const admin_ctx *c, admin_call *call)
{
    if (!have_queues(c, call))
        return;
    troupe_err e = troupe_queue_resume(c->queues, call->param[0]);
    if (e != TROUPE_OK)
        admin_fail(call, "resume", e);
    else
        admin_ok(call, json_pack("{s:b}", "paused", false));
}

/* {"skey": "<hex>"} of an ack or retry: malloc'd, or NULL (400 answered). */
static uint8_t *
body_skey(admin_call *call, size_t *len)
{
    json_t *o = admin_body_object(call);
    if (o == NULL)
        return NULL;
    json_t *v = json_object_get(o, "skey");
    uint8_t *k =
        json_is_string(v) ? admin_unhex(json_string_value(v), len) : NULL;
    if (k == NULL)
        admin_error(call, 400, "bad_field",
                    "field \"skey\" wants the hex storage key a page gave");
    json_decref(o);
    return k;
}

/* What a route by skey does to one invocation. */
enum { BY_RETRY, BY_ACK, BY_PARKED_RETRY, BY_PARKED_DELETE };

static void
skey_route(admin_call *call, const admin_ctx *c, int what)
{
    static const char *const name[] = {"retry", "ack", "retry parked",
                                       "delete parked"};
    if (!have_queues(c, call))
        return;
    size_t n = 0;
    uint8_t *k = body_skey(call, &n);
    if (k == NULL)
        return;
    const char *q = call->param[0];
    troupe_sync s = TROUPE_SYNC_DEFAULT;
    troupe_err e =
        what == BY_RETRY ? troupe_queue_reschedule_wait(c->queues, q, k, n,
                                                        troupe_now_ms(), s)
        : what == BY_ACK ? troupe_queue_ack_wait(c->queues, q, k, n, s)
        : what == BY_PARKED_RETRY
            ? troupe_queue_parked_retry_wait(c->queues, q, k, n, s)
            : troupe_queue_parked_delete_wait(c->queues, q, k, n, s);
    free(k);
    if (e != TROUPE_OK)
        admin_fail(call, name[what], e);
    else
        admin_ok(call, json_pack("{s:b}", "ok", true));
}

static void
retry_route(const admin_ctx *c, admin_call *call)
{
    skey_route(call, c, BY_RETRY);
}

static void
ack_route(const admin_ctx *c, admin_call *call)
{
    skey_route(call, c, BY_ACK);
}

/* A parked invocation: pending again (due now, attempts reset), or
 * deleted. */
static void
parked_retry_route(const admin_ctx *c, admin_call *call)
{
    skey_route(call, c, BY_PARKED_RETRY);
}

static void
parked_delete_route(const admin_ctx *c, admin_call *call)
{
    skey_route(call, c, BY_PARKED_DELETE);
}

static void
delete_owner_route(const admin_ctx *c, admin_call *call)
{
    if (!have_queues(c, call))
        return;
    json_t *o = admin_body_object(call);
    if (o == NULL)
        return;
    size_t kl = 0, il = 0;
    uint8_t *kind =
        admin_field_bytes(call, o, "kind", TROUPE_QUEUE_OWNER_MAX, &kl);
    uint8_t *id =
        kind ? admin_field_bytes(call, o, "id", TROUPE_QUEUE_OWNER_MAX, &il)
             : NULL;
    json_decref(o);
    if (id != NULL) {
        size_t deleted = 0;
        troupe_err e = troupe_queue_delete_by_owner_wait(
            c->queues, call->param[0], kind, kl, id, il, NULL, NULL,
            TROUPE_SYNC_DEFAULT, &deleted);
        if (e != TROUPE_OK)
            admin_fail(call, "delete by owner", e);
        else
            admin_ok(call, json_pack("{s:I}", "deleted", (json_int_t)deleted));
    }
    free(kind);
    free(id);
}

const admin_route admin_queue_routes[] = {
    {"GET", "/v1/queues", list_route},
    {"GET", "/v1/queues/{}", stats_route},
    {"GET", "/v1/queues/{}/pending", pending_route},
    {"GET", "/v1/queues/{}/completed", completed_route},
    {"GET", "/v1/queues/{}/parked", parked_route},
    {"GET", "/v1/queues/{}/events", events_route},
    {"POST", "/v1/queues/{}/pause", pause_route},
    {"POST", "/v1/queues/{}/resume", resume_route},
    {"POST", "/v1/queues/{}/retry", retry_route},
    {"POST", "/v1/queues/{}/ack", ack_route},
    {"POST", "/v1/queues/{}/parked/retry", parked_retry_route},
    {"POST", "/v1/queues/{}/parked/delete", parked_delete_route},
    {"POST", "/v1/queues/{}/delete-by-owner", delete_owner_route},
    {NULL, NULL, NULL},
};
