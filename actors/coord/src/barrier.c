/*
 * The barrier (troupe/barrier.h): its table, the check inside a business
 * transaction, and the two-phase message's query-back.
 */
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/barrier.h"
#include "troupe/coord.h"
#include "troupe/internal/runtime.h"
#include "troupe/internal/waiter.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"

#define OP_MAX 16          /* the longest op name, "compensate", fits */
#define MSG_QUERY_TRIES 16 /* troupe_barrier_msg_query_wait's conflicts */

troupe_err
troupe_barrier_create(troupe_tables *t, troupe_tables_cb cb, void *arg)
{
    return troupe_tables_create(t, TROUPE_BARRIER_TABLE, NULL, 0, cb, arg);
}

troupe_err
troupe_barrier_create_wait(troupe_tables *t)
{
    return troupe_tables_create_wait(t, TROUPE_BARRIER_TABLE, NULL, 0);
}

/* The row key of (mode, gid, branch, op) into w. */
static troupe_err
row_key(troupe_key_writer *w, const char *mode, const char *gid, size_t glen,
        const char *branch, const char *op)
{
    troupe_key_put_string(w, mode, strlen(mode));
    troupe_key_put_string(w, gid, glen);
    troupe_key_put_string(w, branch, strlen(branch));
    return troupe_key_put_string(w, op, strlen(op));
}

/* {"reason": op}, packed into p. */
static troupe_err
reason_doc(troupe_packer *p, const char *op)
{
    troupe_pack_init(p);
    troupe_pack_map(p, 1);
    troupe_pack_cstr(p, "reason");
    return troupe_pack_cstr(p, op);
}

/* Buffers the row (key, {"reason": reason}) in tx. */
static troupe_err
put_row(troupe_txn *tx, const troupe_key_writer *k, const char *reason)
{
    troupe_packer p;
    troupe_err e = reason_doc(&p, reason);
    size_t dlen = 0;
    const void *doc = troupe_pack_data(&p, &dlen);
    if (e == TROUPE_OK)
        e = troupe_txn_insert(tx, TROUPE_BARRIER_TABLE, k->buf, k->len, doc,
                              dlen, NULL);
    troupe_pack_fini(&p);
    return e;
}

/* A barrier row's reason (one of the op names), copied into out; ECORRUPT
 * when the document is not a map holding "reason" as a short string. */
static troupe_err
row_reason(const troupe_row *r, char out[OP_MAX + 1])
{
    troupe_reader rd;
    troupe_reader_init(&rd, r->doc, r->doc_len);
    uint32_t n = 0;
    if (troupe_read_map(&rd, &n) != TROUPE_OK)
        return TROUPE_ECORRUPT;
    for (uint32_t i = 0; i < n; i++) {
        const char *k = NULL, *v = NULL;
        size_t kl = 0, vl = 0;
        if (troupe_read_str(&rd, 64, &k, &kl) != TROUPE_OK)
            return TROUPE_ECORRUPT;
        if (kl != 6 || memcmp(k, "reason", 6) != 0) {
            if (troupe_read_skip(&rd) != TROUPE_OK)
                return TROUPE_ECORRUPT;
            continue;
        }
        if (troupe_read_str(&rd, OP_MAX, &v, &vl) != TROUPE_OK || vl == 0)
            return TROUPE_ECORRUPT;
        memcpy(out, v, vl);
        out[vl] = '\0';
        return TROUPE_OK;
    }
    return TROUPE_ECORRUPT;
}

/* ---- the check ---- */

typedef struct check {
    troupe_txn *tx;
    troupe_barrier_cb cb;
    void *arg;
    troupe_key_writer cur;  /* the op's row */
    troupe_key_writer orig; /* the row of the op it undoes, if any */
    bool undoes;
    char op[OP_MAX + 1];
} check;

static void
check_free(check *c)
{
    troupe_key_writer_fini(&c->cur);
    troupe_key_writer_fini(&c->orig);
    troupe_free(c);
}

static bool
row_is(const troupe_row *r, const troupe_key_writer *k)
{
    return r->key_len == k->len && memcmp(r->key, k->buf, k->len) == 0;
}

/* The verdict from what the reads found, and the rows it buffers. */
static troupe_err
decide(check *c, const troupe_rows *rows, troupe_barrier_verdict *v)
{
    bool cur = false, orig = false;
    for (size_t i = 0; i < rows->n; i++) {
        char reason[OP_MAX + 1];
        if (row_reason(&rows->rows[i], reason) != TROUPE_OK)
            return troupe__errf(TROUPE_ECORRUPT,
                                "barrier: a row of %s is not {reason: op}",
                                TROUPE_BARRIER_TABLE);
        if (row_is(&rows->rows[i], &c->cur))
            cur = true;
        else if (c->undoes && row_is(&rows->rows[i], &c->orig))
            orig = true;
    }
    if (cur) { /* ran already, or an action its compensation came before */
        *v = TROUPE_BARRIER_DUPLICATED;
        return TROUPE_OK;
    }
    troupe_err e = TROUPE_OK;
    if (c->undoes && !orig) {
        /* the action never ran: mark it, so that it cannot run later */
        e = put_row(c->tx, &c->orig, c->op);
        *v = TROUPE_BARRIER_NULL_COMPENSATION;
    } else {
        *v = TROUPE_BARRIER_EXECUTE;
    }
    if (e == TROUPE_OK)
        e = put_row(c->tx, &c->cur, c->op);
    return e;
}

static void
on_rows(troupe_err err, troupe_rows *rows, void *arg)
{
    check *c = arg;
    troupe_barrier_verdict v = 0;
    if (err == TROUPE_OK)
        err = decide(c, rows, &v);
    troupe_rows_destroy(rows);
    troupe_barrier_cb cb = c->cb;
    void *cb_arg = c->arg;
    check_free(c);
    cb(err, err == TROUPE_OK ? v : 0, cb_arg);
}

/* b's fields against their rules (troupe/barrier.h). */
static troupe_err
branch_valid(const troupe_barrier_branch *b, troupe_gtx_mode *m)
{
    if (b == NULL)
        return troupe__errf(TROUPE_EINVAL, "barrier: NULL branch");
    if ((*m = troupe_gtx_mode_of(b->mode)) == 0)
        return troupe__errf(TROUPE_EINVAL,
                            "barrier: mode %s%s%s is none of "
                            "saga, tcc, msg, xa, workflow",
                            b->mode ? "\"" : "", b->mode ? b->mode : "NULL",
                            b->mode ? "\"" : "");
    if (!troupe_gid_valid(b->gid, b->gid_len))
        return troupe__errf(TROUPE_EINVAL,
                            "barrier: the gid must be 1..%d bytes of "
                            "[A-Za-z0-9_.:-] (%zu bytes given)",
                            TROUPE_GID_MAX, b->gid ? b->gid_len : 0);
    if (!troupe_gtx_op_valid(*m, b->op))
        return troupe__errf(TROUPE_EINVAL, "barrier: op %s is not one of %s's",
                            b->op ? b->op : "NULL", b->mode);
    bool msg_own = *m == TROUPE_MODE_MSG && strcmp(b->op, "msg") == 0;
    bool id_ok = msg_own ? b->branch_id != NULL &&
                               strcmp(b->branch_id, TROUPE_MSG_BRANCH_ID) == 0
                         : troupe_branch_id_valid(b->branch_id);
    if (!id_ok)
        return troupe__errf(TROUPE_EINVAL, "barrier: branch id %s is not %s",
                            b->branch_id ? b->branch_id : "NULL",
                            msg_own ? "\"00\" (a message's local transaction)"
                                    : "canonical (\"01\"..\"9999\")");
    return TROUPE_OK;
}

troupe_err
troupe_barrier_check(troupe_txn *tx, const troupe_barrier_branch *b,
                     troupe_barrier_cb cb, void *arg)
{
    if (tx == NULL || cb == NULL)
        return troupe__errf(TROUPE_EINVAL, "barrier: NULL transaction or cb");
    troupe_gtx_mode m = 0;
    troupe_err e = branch_valid(b, &m);
    if (e != TROUPE_OK)
        return e;
    check *c = troupe_calloc(1, sizeof(*c));
    if (c == NULL)
        return TROUPE_ENOMEM;
    c->tx = tx;
    c->cb = cb;
    c->arg = arg;
    strcpy(c->op, b->op); /* one of the op names: fits */
    troupe_key_writer_init(&c->cur);
    troupe_key_writer_init(&c->orig);
    const char *undone = troupe_gtx_op_undoes(m, b->op);
    c->undoes = undone != NULL;
    e = row_key(&c->cur, b->mode, b->gid, b->gid_len, b->branch_id, b->op);
    if (e == TROUPE_OK && c->undoes)
        e = row_key(&c->orig, b->mode, b->gid, b->gid_len, b->branch_id,
                    undone);
    if (e != TROUPE_OK) {
        check_free(c);
        return e;
    }
    const void *keys[2] = {c->cur.buf, c->orig.buf};
    size_t lens[2] = {c->cur.len, c->orig.len};
    e = troupe_txn_get_many(tx, TROUPE_BARRIER_TABLE, keys, lens,
                            c->undoes ? 2 : 1, on_rows, c);
    if (e != TROUPE_OK)
        check_free(c);
    return e;
}

typedef struct check_wait {
    troupe__waiter w;
    troupe_barrier_verdict v;
} check_wait;

static void
on_checked(troupe_err err, troupe_barrier_verdict v, void *arg)
{
    check_wait *cw = arg;
    cw->v = v;
    troupe__waiter_release(&cw->w, err, NULL);
}

troupe_err
troupe_barrier_check_wait(troupe_txn *tx, const troupe_barrier_branch *b,
                          troupe_barrier_verdict *out)
{
    troupe_err be = troupe__block_check("troupe_barrier_check_wait");
    if (be != TROUPE_OK)
        return be;
    if (out == NULL)
        return troupe__errf(TROUPE_EINVAL, "barrier: NULL out");
    check_wait cw = {.v = 0};
    troupe__waiter_init(&cw.w, 1);
    troupe_err e = troupe__waiter_finish(
        &cw.w, troupe_barrier_check(tx, b, on_checked, &cw), NULL);
    if (e == TROUPE_OK)
        *out = cw.v;
    return e;
}

/* ---- the two-phase message's query-back ---- */

/* One try: the message's row as the query finds it, or the query's own
 * row committed. *done false: a conflict, try again. */
static troupe_err
msg_query_once(troupe_tables *t, const troupe_key_writer *k,
               troupe_outcome *out, bool *done)
{
    troupe_txn *tx = NULL;
    troupe_err e = troupe_txn_begin(t, NULL, &tx);
    if (e != TROUPE_OK)
        return e;
    troupe_rows *rows = NULL;
    e = troupe_txn_get_wait(tx, TROUPE_BARRIER_TABLE, k->buf, k->len, &rows);
    *done = true;
    if (e == TROUPE_OK) {
        char reason[OP_MAX + 1];
        if (rows->n != 1 || row_reason(&rows->rows[0], reason) != TROUPE_OK)
            e = troupe__errf(TROUPE_ECORRUPT,
                             "barrier: a message's row is not {reason: op}");
        else if (strcmp(reason, "msg") == 0)
            *out = TROUPE_OUTCOME_SUCCESS;
        else if (strcmp(reason, "rollback") == 0)
            *out = TROUPE_OUTCOME_FAILURE;
        else
            e = troupe__errf(TROUPE_ECORRUPT,
                             "barrier: a message's row has reason \"%s\"",
                             reason);
    } else if (e == TROUPE_ENOENT) {
        e = put_row(tx, k, "rollback");
        if (e == TROUPE_OK)
            e = troupe_txn_commit_wait(tx, TROUPE_SYNC_ON);
        if (e == TROUPE_OK)
            *out = TROUPE_OUTCOME_FAILURE;
        else if (e == TROUPE_ECONFLICT || e == TROUPE_EEXIST)
            *done = false; /* the local transaction committed meanwhile */
    }
    troupe_rows_destroy(rows);
    troupe_txn_destroy(tx);
    return e;
}

troupe_err
troupe_barrier_msg_query_wait(troupe_tables *t, const char *gid, size_t gid_len,
                              troupe_outcome *out)
{
    troupe_err be = troupe__block_check("troupe_barrier_msg_query_wait");
    if (be != TROUPE_OK)
        return be;
    if (t == NULL || out == NULL)
        return troupe__errf(TROUPE_EINVAL, "barrier: NULL tables or out");
    if (!troupe_gid_valid(gid, gid_len))
        return troupe__errf(TROUPE_EINVAL,
                            "barrier: the gid must be 1..%d bytes of "
                            "[A-Za-z0-9_.:-]",
                            TROUPE_GID_MAX);
    troupe_key_writer k;
    troupe_key_writer_init(&k);
    troupe_err e =
        row_key(&k, "msg", gid, gid_len, TROUPE_MSG_BRANCH_ID, "msg");
    bool done = false;
    for (int i = 0; e == TROUPE_OK && i < MSG_QUERY_TRIES; i++) {
        e = msg_query_once(t, &k, out, &done);
        if (done)
            break;
        e = TROUPE_OK;
    }
    if (e == TROUPE_OK && !done)
        e = troupe__errf(TROUPE_ECONFLICT,
                         "barrier: the message's query conflicted %d times",
                         MSG_QUERY_TRIES);
    troupe_key_writer_fini(&k);
    return e;
}
