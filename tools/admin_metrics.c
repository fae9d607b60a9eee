/*
 * GET /metrics: the node's figures in Prometheus text format 0.0.4, from
 * the same stats calls as the JSON routes (admin_stats.h).
 *
 * Each metric family is written whole (HELP, TYPE, then every sample with
 * its labels), as the format wants its samples grouped. Counters end in
 * _total; sizes are gauges in bytes, times in seconds. Label values are
 * escaped (backslash, quote, newline); names of tables and queues are
 * UTF-8 already (the catalogs' rule). Each scrape reads every queue's
 * counts, which is one scan of the queue (troupe_queue_stats_wait): a
 * scrape costs in proportion to the rows the queues hold.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "admin_stats.h"

typedef struct out {
    FILE *f;
} out;

static void
family(out *o, const char *name, const char *type, const char *help)
{
    fprintf(o->f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void
label_value(out *o, const char *v)
{
    for (; *v != '\0'; v++) {
        if (*v == '\\' || *v == '"')
            fprintf(o->f, "\\%c", *v);
        else if (*v == '\n')
            fputs("\\n", o->f);
        else
            fputc(*v, o->f);
    }
}

static void
sample(out *o, const char *name, const char *label, const char *value,
       uint64_t v)
{
    fputs(name, o->f);
    if (label != NULL) {
        fprintf(o->f, "{%s=\"", label);
        label_value(o, value);
        fputs("\"}", o->f);
    }
    fprintf(o->f, " %" PRIu64 "\n", v);
}

static void
one(out *o, const char *name, const char *type, const char *help, uint64_t v)
{
    family(o, name, type, help);
    sample(o, name, NULL, NULL, v);
}

static void
runtime_metrics(out *o, const admin_ctx *c)
{
    troupe_sched_stats *ss = NULL;
    unsigned ns = 0;
    if (admin_stats_scheds(c, &ss, &ns) == TROUPE_OK) {
        static const struct {
            const char *name, *help;
        } f[] = {
            {"troupe_scheduler_actors", "Live actors on the scheduler."},
            {"troupe_scheduler_mailbox_messages",
             "Messages in the scheduler's mailboxes or in a turn."},
            {"troupe_scheduler_mailbox_max_messages",
             "The deepest mailbox of the scheduler."},
        };
        for (size_t k = 0; k < 3; k++) {
            family(o, f[k].name, "gauge", f[k].help);
            for (unsigned i = 0; i < ns; i++) {
                char idx[16];
                snprintf(idx, sizeof(idx), "%u", i);
                uint64_t v = k == 0   ? ss[i].actors
                             : k == 1 ? ss[i].queued
                                      : ss[i].max_queued;
                sample(o, f[k].name, "scheduler", idx, v);
            }
        }
        free(ss);
    }
    troupe_runtime_stats rs;
    troupe_runtime_stats_get(c->rt, &rs);
    const char *n = "troupe_runtime_remote_refused_total";
    family(o, n, "counter",
           "Messages from other nodes refused, by reason (kind: local-only "
           "kind, dead: no such actor, full: mailbox or network budget).");
    sample(o, n, "reason", "kind", rs.remote_refused_kind);
    sample(o, n, "reason", "dead", rs.remote_refused_dead);
    sample(o, n, "reason", "full", rs.remote_refused_full);
    one(o, "troupe_runtime_error_replies_total", "counter",
        "Error replies to refused remote asks.", rs.error_replies);
    one(o, "troupe_runtime_error_replies_lost_total", "counter",
        "Error replies the transport refused.", rs.error_replies_lost);
    one(o, "troupe_runtime_mailbox_full_total", "counter",
        "Sends refused with EFULL (a mailbox at its bound).", rs.mailbox_full);
    one(o, "troupe_runtime_network_bytes", "gauge",
        "Bytes of network messages queued in mailboxes.", rs.net_bytes);
    one(o, "troupe_runtime_work_refused_total", "counter",
        "Worker jobs refused with EFULL.", rs.work_refused);
    one(o, "troupe_runtime_work_cancelled_total", "counter",
        "Worker jobs cancelled at shutdown.", rs.work_cancelled);
}

/* A histogram's samples: cumulative buckets, +Inf, sum and count, with
 * label=value on each when label is not NULL; `scale` divides bounds and
 * sum (1e9: nanoseconds shown as seconds). */
static void
hist_samples(out *o, const char *name, const char *label, const char *value,
             const troupe_hist_snapshot *h, double scale)
{
    uint64_t cum = 0;
    for (unsigned i = 0; i <= h->n; i++) {
        cum += h->counts[i];
        fprintf(o->f, "%s_bucket{", name);
        if (label != NULL) {
            fprintf(o->f, "%s=\"", label);
            label_value(o, value);
            fputs("\",", o->f);
        }
        if (i < h->n)
            fprintf(o->f, "le=\"%.9g\"} %" PRIu64 "\n",
                    (double)troupe_hist_bound(h, i) / scale, cum);
        else
            fprintf(o->f, "le=\"+Inf\"} %" PRIu64 "\n", h->count);
    }
    for (int k = 0; k < 2; k++) {
        fprintf(o->f, "%s_%s", name, k == 0 ? "sum" : "count");
        if (label != NULL) {
            fprintf(o->f, "{%s=\"", label);
            label_value(o, value);
            fputs("\"}", o->f);
        }
        if (k == 0)
            fprintf(o->f, " %.9g\n", (double)h->sum / scale);
        else
            fprintf(o->f, " %" PRIu64 "\n", h->count);
    }
}

/* A histogram family of one unlabelled histogram. */
static void
histogram(out *o, const char *name, const char *help,
          const troupe_hist_snapshot *h, double scale)
{
    family(o, name, "histogram", help);
    hist_samples(o, name, NULL, NULL, h, scale);
}

static void
storage_metrics(out *o, const admin_ctx *c)
{
    if (c->commit != NULL) {
        troupe_commit_stats st;
        troupe_commit_get_stats(c->commit, &st);
        one(o, "troupe_commit_batches_total", "counter",
            "Batches the commit pipeline completed.", st.batches);
        one(o, "troupe_commit_groups_total", "counter",
            "RocksDB writes the pipeline issued (groups of batches).",
            st.groups);
        one(o, "troupe_commit_syncs_total", "counter",
            "Of those writes, the synced ones.", st.syncs);
        troupe_hist_snapshot w, g;
        troupe_commit_get_hists(c->commit, &w, &g);
        histogram(o, "troupe_commit_write_seconds",
                  "Time of each group's RocksDB write, its sync included.", &w,
                  1e9);
        histogram(o, "troupe_commit_group_batches",
                  "Batches per group (one RocksDB write).", &g, 1);
    }
    admin_family *f = NULL;
    size_t n = 0;
    if (admin_stats_families(c, &f, &n) != TROUPE_OK)
        return;
    static const struct {
        const char *name, *help;
    } m[] = {
        {"troupe_db_family_keys", "RocksDB's estimate of the family's keys."},
        {"troupe_db_family_live_bytes",
         "Estimated bytes of live data in the family's table files."},
        {"troupe_db_family_file_bytes", "Bytes of the family's table files."},
        {"troupe_db_family_memtable_bytes", "Bytes of the family's memtables."},
    };
    for (size_t k = 0; k < 4; k++) {
        family(o, m[k].name, "gauge", m[k].help);
        for (size_t i = 0; i < n; i++) {
            const troupe_cf_stats *s = &f[i].st;
            uint64_t v = k == 0   ? s->keys
                         : k == 1 ? s->live_bytes
                         : k == 2 ? s->file_bytes
                                  : s->mem_bytes;
            sample(o, m[k].name, "family", f[i].name, v);
        }
    }
    admin_stats_families_free(f);
}

static void
node_metrics(out *o, const admin_ctx *c)
{
    if (c->node == NULL)
        return;
    troupe_node_stats s;
    troupe_node_stats_get(c->node, &s);
    static const struct {
        const char *name, *help;
        size_t off;
    } m[] = {
#define NS(field, name, help)                                                  \
    {"troupe_node_" name "_total", help, offsetof(troupe_node_stats, field)}
        NS(msgs_sent, "messages_sent", "Envelopes handed to nng."),
        NS(frames_sent, "frames_sent", "Frames sent."),
        NS(msgs_recv, "messages_received",
           "Envelopes received and delivered or handled."),
        NS(frames_recv, "frames_received", "Frames received."),
        NS(bad_frames, "bad_frames",
           "Received frames refused by strict decoding."),
        NS(stale_frames, "stale_frames",
           "Frames meant for another "
           "incarnation."),
        NS(deliver_fail, "deliver_failed",
           "Received envelopes the runtime refused."),
        NS(gave_up, "gave_up", "Queued messages given up."),
        NS(error_replies, "error_replies",
           "Error replies sent for messages given up."),
        NS(full, "full", "Sends refused with EFULL."),
        NS(refused, "refused", "Inbox connections refused or closed."),
        NS(auth_failed, "auth_failed", "Proofs that did not check."),
        NS(unauth_frames, "unauthenticated_frames",
           "Frames dropped before their connection's handshake completed."),
        NS(spoofed, "spoofed", "Envelopes dropped for a spoofed sender."),
        NS(reaped, "reaped", "Links freed while the node runs."),
        NS(relistened, "relistened", "Listeners replaced."),
        NS(redialed, "redialed", "Dialers replaced."),
#undef NS
    };
    for (size_t k = 0; k < sizeof(m) / sizeof(m[0]); k++) {
        uint64_t v;
        memcpy(&v, (const char *)&s + m[k].off, sizeof(v));
        one(o, m[k].name, "counter", m[k].help, v);
    }
    one(o, "troupe_node_links", "gauge", "Outgoing links now.", s.links);
    one(o, "troupe_node_connections", "gauge", "Inbox connections now.",
        s.conns);
    one(o, "troupe_node_handshakes", "gauge",
        "Inbox connections still in their handshake.", s.pending);
}

static void
table_metrics(out *o, const admin_ctx *c)
{
    troupe_tables_stats *st = NULL;
    if (c->tables == NULL ||
        troupe_tables_stats_wait(c->tables, &st) != TROUPE_OK)
        return;
    static const struct {
        const char *name, *type, *help;
    } m[] = {
        {"troupe_table_version_records", "gauge",
         "Key-version records held in memory."},
        {"troupe_table_version_bytes", "gauge",
         "Estimated heap bytes of those records."},
        {"troupe_table_version_evicted_total", "counter",
         "Key-version records evicted since open."},
    };
    for (size_t k = 0; k < 3; k++) {
        family(o, m[k].name, m[k].type, m[k].help);
        for (size_t i = 0; i < st->n; i++) {
            const troupe_table_stats *t = &st->tables[i];
            uint64_t v = k == 0   ? t->version_records
                         : k == 1 ? t->version_bytes
                                  : t->version_evicted;
            sample(o, m[k].name, "table", t->name, v);
        }
    }
    one(o, "troupe_txn_begun_total", "counter", "Transactions begun.",
        st->txn_created);
    one(o, "troupe_txn_closed_total", "counter", "Transactions destroyed.",
        st->txn_closed);
    one(o, "troupe_txn_running", "gauge", "Transactions begun, not closed.",
        st->txn_running);
    static const char *const names[] = {"troupe_txn_query_version_total",
                                        "troupe_txn_prepare_total",
                                        "troupe_txn_commit_total"};
    static const char *const helps[] = {
        "Version queries of transactions, by result.",
        ("Versioned commits' prepare phase, by result (failed: a conflict "
         "or an error)."),
        "Versioned commits' commit phase, by result."};
    const uint64_t v[3][2] = {{st->qver_ok, st->qver_failed},
                              {st->vprepare_ok, st->vprepare_failed},
                              {st->vcommit_ok, st->vcommit_failed}};
    const char *n;
    for (size_t k = 0; k < 3; k++) {
        family(o, names[k], "counter", helps[k]);
        sample(o, names[k], "result", "ok", v[k][0]);
        sample(o, names[k], "result", "failed", v[k][1]);
    }
    n = "troupe_txn_commit_outcomes_total";
    family(o, n, "counter",
           "Transaction commits by result (conflict: ECONFLICT; failed: "
           "another error).");
    sample(o, n, "result", "ok", st->commit_ok);
    sample(o, n, "result", "conflict", st->commit_conflict);
    sample(o, n, "result", "failed", st->commit_failed);
    static const struct {
        const char *name, *help;
    } h[] = {
        {"troupe_table_get_seconds",
         "Table gets, from the call to its result."},
        {"troupe_table_write_seconds",
         "Table inserts, updates, upserts and deletes, from the call to its "
         "result."},
        {"troupe_table_scan_seconds",
         "Table scans, from the call to its result."},
        {"troupe_table_query_seconds",
         "Index queries and counts, from the call to its result."},
        {"troupe_txn_commit_seconds",
         "Transaction commits, from the call to its result."},
    };
    const troupe_hist_snapshot *hs[] = {&st->get_ns, &st->write_ns,
                                        &st->scan_ns, &st->query_ns,
                                        &st->commit_ns};
    for (size_t k = 0; k < sizeof(h) / sizeof(h[0]); k++)
        histogram(o, h[k].name, h[k].help, hs[k], 1e9);
    troupe_tables_stats_destroy(st);
}

typedef struct qfig {
    const char *name;
    bool paused;
    uint32_t partitions;
    troupe_queue_stats *st; /* NULL: could not be read */
    bool have_c;            /* c was read */
    troupe_queue_counters c;
} qfig;

/* The handler-call counters of every queue read. */
static void
queue_counters(out *o, const qfig *q, size_t n)
{
    const char *name = "troupe_queue_deliveries_total";
    family(o, name, "counter", "Handler calls of the queue's workers.");
    for (size_t i = 0; i < n; i++)
        if (q[i].have_c)
            sample(o, name, "queue", q[i].name, q[i].c.delivered);
    name = "troupe_queue_outcomes_total";
    family(o, name, "counter",
           "Handler calls by outcome (ack, reschedule: committed; error: the "
           "handler failed or gave no valid outcome; timeout: it outlived "
           "the worker's timeout; commit_failed: the outcome did not "
           "commit).");
    static const char *const outcome[] = {"ack", "reschedule", "error",
                                          "timeout", "commit_failed"};
    for (size_t i = 0; i < n; i++) {
        if (!q[i].have_c)
            continue;
        const troupe_queue_counters *c = &q[i].c;
        const uint64_t v[] = {c->acked, c->rescheduled, c->errors, c->timeouts,
                              c->commit_failed};
        for (size_t k = 0; k < 5; k++) {
            fprintf(o->f, "%s{queue=\"", name);
            label_value(o, q[i].name);
            fprintf(o->f, "\",outcome=\"%s\"} %" PRIu64 "\n", outcome[k], v[k]);
        }
    }
    name = "troupe_queue_delivery_attempts";
    family(o, name, "histogram",
           "The attempt number of each handler call (1: first delivery).");
    for (size_t i = 0; i < n; i++)
        if (q[i].have_c)
            hist_samples(o, name, "queue", q[i].name, &q[i].c.attempts, 1);
}

static void
queue_metrics(out *o, const admin_ctx *c)
{
    troupe_queue_info *info = NULL;
    size_t n = 0;
    if (c->queues == NULL ||
        troupe_queues_list(c->queues, &info, &n) != TROUPE_OK)
        return;
    qfig *q = calloc(n ? n : 1, sizeof(*q));
    if (q == NULL) {
        troupe_free(info);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        q[i] = (qfig){info[i].name, info[i].paused, info[i].partitions,
                      NULL,         false,          {0}};
        /* a queue dropped meanwhile has no counts: left out of those */
        (void)troupe_queue_stats_wait(c->queues, info[i].name, &q[i].st);
        q[i].have_c = troupe_queue_counters_get(c->queues, info[i].name,
                                                &q[i].c) == TROUPE_OK;
    }
    int64_t now = troupe_now_ms();
    static const struct {
        const char *name, *help;
    } m[] = {
        {"troupe_queue_pending", "Pending invocations."},
        {"troupe_queue_completed", "Completed invocations kept."},
        {"troupe_queue_malformed", "Rows that do not decode."},
        {"troupe_queue_lag_seconds",
         "How far the oldest pending invocation is past due (0: none)."},
        {"troupe_queue_partitions", "Partitions."},
        {"troupe_queue_paused", "1 when delivery is paused."},
    };
    for (size_t k = 0; k < sizeof(m) / sizeof(m[0]); k++) {
        family(o, m[k].name, "gauge", m[k].help);
        for (size_t i = 0; i < n; i++) {
            const troupe_queue_stats *s = q[i].st;
            uint64_t v;
            if (k == 3 && s != NULL) {
                int64_t lag = s->oldest_due_ms < 0 ? 0 : now - s->oldest_due_ms;
                fprintf(o->f, "%s{queue=\"", m[k].name);
                label_value(o, q[i].name);
                fprintf(o->f, "\"} %.3f\n", lag > 0 ? (double)lag / 1e3 : 0.0);
                continue;
            }
            if (k == 4 || k == 5) {
                v = k == 4 ? q[i].partitions : q[i].paused;
            } else if (s == NULL) {
                continue;
            } else {
                v = k == 0 ? s->pending : k == 1 ? s->completed : s->malformed;
            }
            sample(o, m[k].name, "queue", q[i].name, v);
        }
    }
    queue_counters(o, q, n);
    for (size_t i = 0; i < n; i++)
        troupe_free(q[i].st);
    free(q);
    troupe_free(info);
}

static void
metrics_route(const admin_ctx *c, admin_call *call)
{
    out o;
    char *buf = NULL;
    size_t len = 0;
    if ((o.f = open_memstream(&buf, &len)) == NULL) {
        admin_error(call, 500, "no_memory", "out of memory");
        return;
    }
    runtime_metrics(&o, c);
    storage_metrics(&o, c);
    node_metrics(&o, c);
    table_metrics(&o, c);
    queue_metrics(&o, c);
    bool bad = ferror(o.f) != 0;
    if (fclose(o.f) != 0 || bad) {
        free(buf);
        admin_error(call, 500, "no_memory", "out of memory");
        return;
    }
    call->status = 200;
    call->text = buf;
    call->text_len = len;
    call->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

const admin_route admin_metrics_routes[] = {
    {"GET", "/metrics", metrics_route},
    {NULL, NULL, NULL},
};
