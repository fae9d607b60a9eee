/*
 * Index queries through the catalog: each table has an index actor
 * (actors/index) holding a copy of its index list, respawned by the
 * catalog whenever that list or an index's state changes. These calls
 * look it up and ask it, so a query on an index still building answers
 * ESTATE until the build is done. The blocking twins need no actor: they
 * run the query on the caller's thread against the catalog's current
 * schema (same checks, same answers).
 */
#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/runtime.h"

typedef struct qcall {
    troupe_tables_query_cb qcb;
    troupe_tables_count_cb ccb;
    void *arg;
    ttables_shared *ts;
    uint64_t t0; /* when the call began */
} qcall;

static void
on_query_reply(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    qcall *c = arg;
    troupe_index_result *res = NULL;
    uint64_t n = 0;
    if (err == TROUPE_OK && reply != NULL)
        err = c->qcb != NULL ? troupe_index_query_reply(reply, &res)
                             : troupe_index_count_reply(reply, &n);
    troupe__tables_op_done(c->ts, TTABLES_OP_QUERY, c->t0);
    if (c->qcb != NULL)
        c->qcb(err, res, c->arg);
    else
        c->ccb(err, n, c->arg);
    troupe_free(c);
}

static troupe_err
ask_index(troupe_tables *t, const char *table, const char *index,
          const troupe_index_query *q, troupe_tables_query_cb qcb,
          troupe_tables_count_cb ccb, void *arg)
{
    troupe_addr a;
    uint32_t timeout;
    troupe_runtime *rt;
    if (q == NULL || (qcb == NULL && ccb == NULL))
        return TROUPE_EINVAL;
    uint64_t t0 = troupe__tables_op_clock();
    troupe_err e = troupe__tables_lookup_index(t, table, &a, &timeout, &rt);
    troupe_msg *m = NULL;
    if (e == TROUPE_OK)
        e = qcb != NULL ? troupe_index_query_msg(index, q, &m)
                        : troupe_index_count_msg(index, q, &m);
    if (e != TROUPE_OK)
        return e;
    qcall *c = troupe_malloc(sizeof(*c));
    if (c == NULL) {
        troupe_msg_destroy(m);
        return TROUPE_ENOMEM;
    }
    c->qcb = qcb;
    c->ccb = ccb;
    c->arg = arg;
    c->ts = &t->ts;
    c->t0 = t0;
    e = troupe_runtime_ask(rt, a, &m, timeout, on_query_reply, c);
    if (e != TROUPE_OK)
        troupe_free(c);
    return e;
}

troupe_err
troupe_tables_query(troupe_tables *t, const char *table, const char *index,
                    const troupe_index_query *q, troupe_tables_query_cb cb,
                    void *arg)
{
    if (cb == NULL)
        return TROUPE_EINVAL;
    return ask_index(t, table, index, q, cb, NULL, arg);
}

troupe_err
troupe_tables_count(troupe_tables *t, const char *table, const char *index,
                    const troupe_index_query *q, troupe_tables_count_cb cb,
                    void *arg)
{
    if (cb == NULL)
        return TROUPE_EINVAL;
    return ask_index(t, table, index, q, NULL, cb, arg);
}

/* Runs q on this thread: count when n != NULL, else query into *out. */
static troupe_err
run_here(troupe_tables *t, const char *table, const char *index,
         const troupe_index_query *q, troupe_index_result **out, uint64_t *n)
{
    if (q == NULL)
        return TROUPE_EINVAL;
    uint64_t t0 = troupe__tables_op_clock();
    tindex_env env;
    troupe_err e = troupe__tables_index_env(t, table, index, &env);
    if (e != TROUPE_OK)
        return e;
    troupe__index_run rq = {
        .q = q,
        .def = env.def, /* a building index answers ESTATE */
        .table_id = env.table_id,
        .now_ms = env.now_ms > 0 ? (uint64_t)env.now_ms : 0};
    e = n != NULL ? troupe_index_count(env.db, &rq, n)
                  : troupe_index_query_run(env.db, &rq, out);
    troupe__tschema_release(env.schema);
    troupe__tables_op_done(&t->ts, TTABLES_OP_QUERY, t0);
    return e;
}

troupe_err
troupe_tables_query_wait(troupe_tables *t, const char *table, const char *index,
                         const troupe_index_query *q, troupe_index_result **out)
{
    if (out == NULL)
        return TROUPE_EINVAL;
    *out = NULL;
    troupe_err be = troupe__block_check("troupe_tables_query_wait");
    if (be != TROUPE_OK)
        return be;
    return run_here(t, table, index, q, out, NULL);
}

troupe_err
troupe_tables_count_wait(troupe_tables *t, const char *table, const char *index,
                         const troupe_index_query *q, uint64_t *n)
{
    if (n == NULL)
        return TROUPE_EINVAL;
    *n = 0;
    troupe_err be = troupe__block_check("troupe_tables_count_wait");
    if (be != TROUPE_OK)
        return be;
    return run_here(t, table, index, q, NULL, n);
}

troupe_err
troupe_tables_query_and_wait(troupe_tables *t, const char *table,
                             const char *index_a, const troupe_index_query *qa,
                             const char *index_b, const troupe_index_query *qb,
                             const void *after, size_t after_len, size_t limit,
                             troupe_index_result **out)
{
    if (out == NULL)
        return TROUPE_EINVAL;
    *out = NULL;
    troupe_err be = troupe__block_check("troupe_tables_query_and_wait");
    if (be != TROUPE_OK)
        return be;
    if (qa == NULL || qb == NULL)
        return TROUPE_EINVAL;
    tindex_env ea, eb = {0};
    troupe_err e = troupe__tables_index_env(t, table, index_a, &ea);
    if (e != TROUPE_OK)
        return e;
    e = troupe__tables_index_env(t, table, index_b, &eb);
    troupe_snapshot *snap = NULL; /* both sides read one instant */
    if (e == TROUPE_OK)
        e = troupe_snapshot_create(ea.db, &snap);
    if (e == TROUPE_OK) {
        troupe__index_run a = {
            .q = qa, .def = ea.def, .table_id = ea.table_id, .snap = snap};
        troupe__index_run b = {
            .q = qb, .def = eb.def, .table_id = ea.table_id, .snap = snap};
        e = troupe_index_query_and(ea.db, &a, &b, after, after_len, limit, out);
    }
    troupe_snapshot_destroy(snap);
    troupe__tschema_release(ea.schema);
    troupe__tschema_release(eb.schema);
    return e;
}
