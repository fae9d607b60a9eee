/*
 * The admin endpoint's figures: what `troupe stats` prints, live.
 *
 *   GET /v1/runtime   schedulers (actors, mailbox depth) and counters
 *   GET /v1/commit    the commit pipeline's counters
 *   GET /v1/db        every column family's figures
 *   GET /v1/node      the transport's counters, links and connections
 *   GET /v1/tables    the tables and their counters, transactions
 *
 * Each reads the library's stats calls at the moment of the request; none
 * writes. admin_stats_* are shared with /metrics (admin_metrics.c), which
 * shows the same figures in Prometheus text.
 */
#include <stdlib.h>

#include "admin_stats.h"

troupe_err
admin_stats_scheds(const admin_ctx *c, troupe_sched_stats **out, unsigned *n)
{
    unsigned ns = troupe_runtime_schedulers(c->rt);
    troupe_sched_stats *st = calloc(ns ? ns : 1, sizeof(*st));
    if (st == NULL)
        return TROUPE_ENOMEM;
    for (unsigned i = 0; i < ns; i++) {
        troupe_err e = troupe_runtime_sched_stats_wait(c->rt, i, &st[i]);
        if (e != TROUPE_OK) {
            free(st);
            return e;
        }
    }
    *out = st;
    *n = ns;
    return TROUPE_OK;
}

troupe_err
admin_stats_families(const admin_ctx *c, admin_family **out, size_t *n)
{
    char **names = NULL;
    size_t nn = 0;
    troupe_err e = troupe_db_cf_names(c->db, &names, &nn);
    if (e != TROUPE_OK)
        return e;
    admin_family *f = calloc(nn ? nn : 1, sizeof(*f));
    if (f == NULL) {
        troupe_free(names);
        return TROUPE_ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < nn; i++) {
        troupe_cf *cf = NULL;
        /* a family dropped since the names were read is left out */
        if (troupe_db_cf(c->db, names[i], &cf) != TROUPE_OK ||
            troupe_db_cf_stats(c->db, cf, &f[k].st) != TROUPE_OK)
            continue;
        f[k].name = names[i];
        k++;
    }
    f[0].names_ = names;
    *out = f;
    *n = k;
    return TROUPE_OK;
}

void
admin_stats_families_free(admin_family *f)
{
    if (f != NULL)
        troupe_free(f[0].names_);
    free(f);
}

static void
runtime_route(const admin_ctx *c, admin_call *call)
{
    troupe_sched_stats *ss = NULL;
    unsigned ns = 0;
    troupe_err e = admin_stats_scheds(c, &ss, &ns);
    if (e != TROUPE_OK) {
        admin_fail(call, "scheduler figures", e);
        return;
    }
    json_t *arr = json_array();
    for (unsigned i = 0; arr != NULL && i < ns; i++)
        json_array_append_new(
            arr, json_pack("{s:I,s:I,s:I,s:I}", "index", (json_int_t)i,
                           "actors", (json_int_t)ss[i].actors, "queued",
                           (json_int_t)ss[i].queued, "max_queued",
                           (json_int_t)ss[i].max_queued));
    free(ss);
    troupe_runtime_stats rs;
    troupe_runtime_stats_get(c->rt, &rs);
    json_t *cnt = json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "remote_refused_kind",
        (json_int_t)rs.remote_refused_kind, "remote_refused_dead",
        (json_int_t)rs.remote_refused_dead, "remote_refused_full",
        (json_int_t)rs.remote_refused_full, "error_replies",
        (json_int_t)rs.error_replies, "error_replies_lost",
        (json_int_t)rs.error_replies_lost, "mailbox_full",
        (json_int_t)rs.mailbox_full, "net_bytes", (json_int_t)rs.net_bytes,
        "work_refused", (json_int_t)rs.work_refused, "work_cancelled",
        (json_int_t)rs.work_cancelled);
    admin_ok(call, json_pack("{s:I,s:o*,s:o*}", "node_id",
                             (json_int_t)troupe_runtime_node_id(c->rt),
                             "schedulers", arr, "counters", cnt));
}

static void
commit_route(const admin_ctx *c, admin_call *call)
{
    if (c->commit == NULL) {
        admin_error(call, 404, "not_found", "this node has no commit pipeline");
        return;
    }
    troupe_commit_stats st;
    troupe_commit_get_stats(c->commit, &st);
    admin_ok(call, json_pack("{s:I,s:I,s:I}", "batches", (json_int_t)st.batches,
                             "groups", (json_int_t)st.groups, "syncs",
                             (json_int_t)st.syncs));
}

static void
db_route(const admin_ctx *c, admin_call *call)
{
    admin_family *f = NULL;
    size_t n = 0;
    troupe_err e = admin_stats_families(c, &f, &n);
    if (e != TROUPE_OK) {
        admin_fail(call, "list families", e);
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; arr != NULL && i < n; i++)
        json_array_append_new(
            arr, json_pack("{s:s,s:I,s:I,s:I,s:I}", "name", f[i].name, "keys",
                           (json_int_t)f[i].st.keys, "live_bytes",
                           (json_int_t)f[i].st.live_bytes, "file_bytes",
                           (json_int_t)f[i].st.file_bytes, "mem_bytes",
                           (json_int_t)f[i].st.mem_bytes));
    admin_stats_families_free(f);
    admin_ok(call, json_pack("{s:o*}", "families", arr));
}

static void
node_route(const admin_ctx *c, admin_call *call)
{
    if (c->node == NULL) {
        admin_error(call, 404, "not_found", "this process runs no node");
        return;
    }
    troupe_node_stats s;
    troupe_node_stats_get(c->node, &s);
    json_t *cnt = json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,"
        "s:I}",
        "msgs_sent", (json_int_t)s.msgs_sent, "frames_sent",
        (json_int_t)s.frames_sent, "msgs_recv", (json_int_t)s.msgs_recv,
        "frames_recv", (json_int_t)s.frames_recv, "bad_frames",
        (json_int_t)s.bad_frames, "stale_frames", (json_int_t)s.stale_frames,
        "deliver_fail", (json_int_t)s.deliver_fail, "gave_up",
        (json_int_t)s.gave_up, "error_replies", (json_int_t)s.error_replies,
        "full", (json_int_t)s.full, "refused", (json_int_t)s.refused,
        "auth_failed", (json_int_t)s.auth_failed, "unauth_frames",
        (json_int_t)s.unauth_frames, "spoofed", (json_int_t)s.spoofed, "reaped",
        (json_int_t)s.reaped, "relistened", (json_int_t)s.relistened,
        "redialed", (json_int_t)s.redialed);
    const char *url = troupe_node_url(c->node);
    admin_ok(call, json_pack("{s:I,s:s?,s:I,s:I,s:I,s:o*}", "id",
                             (json_int_t)troupe_runtime_node_id(c->rt), "url",
                             url, "links", (json_int_t)s.links, "conns",
                             (json_int_t)s.conns, "pending",
                             (json_int_t)s.pending, "counters", cnt));
}

static void
tables_route(const admin_ctx *c, admin_call *call)
{
    if (c->tables == NULL) {
        admin_error(call, 404, "not_found", "this node serves no tables");
        return;
    }
    troupe_tables_stats *st = NULL;
    troupe_err e = troupe_tables_stats_wait(c->tables, &st);
    if (e != TROUPE_OK) {
        admin_fail(call, "table figures", e);
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; arr != NULL && i < st->n; i++) {
        const troupe_table_stats *t = &st->tables[i];
        json_array_append_new(
            arr, json_pack("{s:o*,s:I,s:I,s:I}", "name",
                           admin_json_bytes(t->name, strlen(t->name)),
                           "version_records", (json_int_t)t->version_records,
                           "version_bytes", (json_int_t)t->version_bytes,
                           "version_evicted", (json_int_t)t->version_evicted));
    }
    json_t *j = json_pack(
        "{s:o*,s:{s:I,s:I,s:I},s:{s:I,s:I},s:{s:I,s:I},s:{s:I,s:I}}", "tables",
        arr, "txn", "created", (json_int_t)st->txn_created, "closed",
        (json_int_t)st->txn_closed, "running", (json_int_t)st->txn_running,
        "query_version", "ok", (json_int_t)st->qver_ok, "failed",
        (json_int_t)st->qver_failed, "versioned_prepare", "ok",
        (json_int_t)st->vprepare_ok, "failed", (json_int_t)st->vprepare_failed,
        "versioned_commit", "ok", (json_int_t)st->vcommit_ok, "failed",
        (json_int_t)st->vcommit_failed);
    troupe_tables_stats_destroy(st);
    admin_ok(call, j);
}

const admin_route admin_stats_routes[] = {
    {"GET", "/v1/runtime", runtime_route}, {"GET", "/v1/commit", commit_route},
    {"GET", "/v1/db", db_route},           {"GET", "/v1/node", node_route},
    {"GET", "/v1/tables", tables_route},   {NULL, NULL, NULL},
};
