/*
 * The coordinator's readers (troupe/coordinator.h): query, detail and
 * list of the stored transactions, straight from troupe.gtx (the last
 * committed state; a shard's change in flight is not seen).
 */
#include <stdio.h>
#include <string.h>

#include "coord_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/runtime.h"

#define LIST_PAGE 256

/* ---- query and list ---- */

static void
info_of(const tc_gtx *g, troupe_gtx_info *out)
{
    memset(out, 0, sizeof(*out));
    out->mode = g->mode;
    out->status = (troupe_gtx_status)g->status;
    if (g->reason != NULL) {
        size_t rl = strlen(g->reason);
        memcpy(out->reason, g->reason, rl < 1024 ? rl : 1024);
    }
    out->hold = (troupe_wf_hold)g->hold;
    out->steps = g->n_steps;
    out->attempts = g->attempts;
    out->created_ms = g->created_ms;
    out->updated_ms = g->updated_ms;
    out->finished_ms = g->finished_ms;
}

/* gid's stored document, decoded (the caller's: troupe__gtx_free), after
 * the checks every reader makes: the thread, NULLs (out is the reader's
 * out-pointer), the gid. what names the reader in the errors. */
static troupe_err
stored_read(troupe_coord *c, const char *gid, size_t gid_len, const void *out,
            const char *what, tc_gtx **g)
{
    troupe_err be = troupe__block_check(what);
    if (be != TROUPE_OK)
        return be;
    if (c == NULL || out == NULL)
        return troupe__errf(TROUPE_EINVAL, "%s: NULL argument", what);
    if (!troupe_gid_valid(gid, gid_len))
        return troupe__errf(TROUPE_EINVAL, "%s: a bad gid", what);
    troupe_rows *rows = NULL;
    troupe_err e =
        troupe_table_get_wait(c->tables, TROUPE_GTX_TABLE, gid, gid_len, &rows);
    if (e != TROUPE_OK)
        return e;
    e = troupe__coord_row_decode(&rows->rows[0], g);
    troupe_rows_destroy(rows);
    return e;
}

troupe_err
troupe_gtx_query_wait(troupe_coord *c, const char *gid, size_t gid_len,
                      troupe_gtx_info *out)
{
    tc_gtx *g = NULL;
    troupe_err e =
        stored_read(c, gid, gid_len, out, "troupe_gtx_query_wait", &g);
    if (e != TROUPE_OK)
        return e;
    info_of(g, out);
    troupe__gtx_free(g);
    return TROUPE_OK;
}

_Static_assert(TROUPE_GTX_BRANCH_OPS_MAX == TROUPE_GTX_OPS_MAX,
               "a public branch holds every op a stored step can");
_Static_assert((int)TROUPE_GTX_CALL_TODO == TC_TODO &&
                   (int)TROUPE_GTX_CALL_DISPATCHED == TC_DOING &&
                   (int)TROUPE_GTX_CALL_SUCCEEDED == TC_DONE &&
                   (int)TROUPE_GTX_CALL_FAILED == TC_REFUSED,
               "the public call states are the stored ones");

/* Appends the stored call k (the op named op) to b. */
static void
op_of(troupe_gtx_branch *b, const char *op, const tc_call *k)
{
    troupe_gtx_op *o = &b->ops[b->n_ops++];
    o->op = op;
    memcpy(o->target, k->target, strlen(k->target) + 1);
    o->payload_len = k->payload_len;
    o->state = (troupe_gtx_call_state)k->state;
    o->attempts = k->attempts;
    o->last = (troupe_outcome)k->last;
}

troupe_err
troupe_gtx_detail_wait(troupe_coord *c, const char *gid, size_t gid_len,
                       troupe_gtx_detail **out)
{
    if (out != NULL)
        *out = NULL;
    tc_gtx *g = NULL;
    troupe_err e =
        stored_read(c, gid, gid_len, out, "troupe_gtx_detail_wait", &g);
    if (e != TROUPE_OK)
        return e;
    bool query = g->query.target != NULL;
    size_t n = g->n_steps + (query ? 1 : 0);
    troupe_gtx_detail *d = troupe_calloc(1, sizeof(*d));
    if (d == NULL || (n > 0 && (d->branches = troupe_calloc(
                                    n, sizeof(*d->branches))) == NULL)) {
        troupe_free(d);
        troupe__gtx_free(g);
        return TROUPE_ENOMEM;
    }
    info_of(g, &d->info);
    d->next_due_ms = g->due_ms;
    if (query) {
        troupe_gtx_branch *b = &d->branches[d->n_branches++];
        memcpy(b->id, TROUPE_MSG_BRANCH_ID, sizeof(TROUPE_MSG_BRANCH_ID));
        op_of(b, g->mode == TROUPE_MODE_WORKFLOW ? "run" : "msg", &g->query);
    }
    for (uint32_t i = 0; i < g->n_steps; i++) {
        troupe_gtx_branch *b = &d->branches[d->n_branches++];
        /* i + 1 is at most TROUPE_GTX_STEPS_MAX: the cast tells the
         * compiler it fits the id */
        snprintf(b->id, sizeof(b->id), "%02u", (unsigned short)(i + 1));
        const tc_step *st = &g->steps[i];
        if (g->mode == TROUPE_MODE_WORKFLOW) {
            b->kind = st->kind == TC_WF_STEP    ? "step"
                      : st->kind == TC_WF_AWAKE ? "awakeable"
                                                : "version";
            snprintf(b->name, sizeof(b->name), "%s",
                     st->name != NULL ? st->name : "");
            b->version = st->version;
        }
        for (unsigned k = 0; k < TROUPE_GTX_OPS_MAX; k++)
            if (g->steps[i].call[k].target != NULL)
                op_of(b, troupe_gtx_op_at(g->mode, k), &g->steps[i].call[k]);
    }
    troupe__gtx_free(g);
    *out = d;
    return TROUPE_OK;
}

void
troupe_gtx_detail_destroy(troupe_gtx_detail *d)
{
    if (d == NULL)
        return;
    troupe_free(d->branches);
    troupe_free(d);
}

void
troupe_gtx_page_destroy(troupe_gtx_page *p)
{
    if (p == NULL)
        return;
    troupe_free(p->items);
    troupe_free(p);
}

/* The rows of one read, filtered into p (room for limit), until p is
 * full; *used gets how many rows were read. */
static troupe_err
list_rows(const troupe_rows *rows, const troupe_gtx_filter *f, size_t limit,
          troupe_gtx_page *p, size_t *used)
{
    size_t i = 0;
    for (; i < rows->n && p->n < limit; i++) {
        const troupe_row *r = &rows->rows[i];
        tc_gtx *g = NULL;
        troupe_err e = troupe__coord_row_decode(r, &g);
        if (e != TROUPE_OK)
            return troupe__errf(e, "gtx list: a stored transaction breaks "
                                   "its format");
        memcpy(p->cursor, r->key, r->key_len);
        p->cursor[r->key_len] = '\0';
        if ((f->status == 0 || (int)f->status == (int)g->status) &&
            (f->mode == 0 || f->mode == g->mode)) {
            troupe_gtx_entry *en = &p->items[p->n++];
            memcpy(en->gid, p->cursor, r->key_len + 1);
            info_of(g, &en->info);
        }
        troupe__gtx_free(g);
    }
    *used = i;
    return TROUPE_OK;
}

troupe_err
troupe_gtx_list_wait(troupe_coord *c, const troupe_gtx_filter *f,
                     const char *after, size_t limit, troupe_gtx_page **out)
{
    troupe_err be = troupe__block_check("troupe_gtx_list_wait");
    if (be != TROUPE_OK)
        return be;
    if (c == NULL || out == NULL || limit == 0 || limit > TROUPE_GTX_LIST_MAX)
        return troupe__errf(TROUPE_EINVAL,
                            "gtx list: NULL, or a limit not in 1..%d",
                            TROUPE_GTX_LIST_MAX);
    size_t al = after != NULL ? strlen(after) : 0;
    if (after != NULL && !troupe_gid_valid(after, al))
        return troupe__errf(TROUPE_EINVAL, "gtx list: after is not a gid");
    troupe_gtx_filter any = {0};
    f = f != NULL ? f : &any;
    troupe_gtx_page *p = troupe_calloc(1, sizeof(*p));
    if (p == NULL ||
        (p->items = troupe_calloc(limit, sizeof(*p->items))) == NULL) {
        troupe_free(p);
        return TROUPE_ENOMEM;
    }
    if (after != NULL)
        memcpy(p->cursor, after, al + 1);
    size_t read = 0, budget = 10 * limit;
    troupe_err e = TROUPE_OK;
    bool more = true;
    while (e == TROUPE_OK && more && p->n < limit && read < budget) {
        /* the next key after the cursor: cursor + 0x00 */
        char start[TROUPE_GID_MAX + 1];
        size_t sl = strlen(p->cursor);
        memcpy(start, p->cursor, sl);
        start[sl] = '\0';
        size_t want = budget - read < LIST_PAGE ? budget - read : LIST_PAGE;
        troupe_scan_opts so = {.start = sl > 0 ? start : NULL,
                               .start_len = sl > 0 ? sl + 1 : 0,
                               .limit = want};
        troupe_rows *rows = NULL;
        e = troupe_table_scan_wait(c->tables, TROUPE_GTX_TABLE, &so, &rows);
        if (e != TROUPE_OK)
            break;
        size_t used = 0;
        e = list_rows(rows, f, limit, p, &used);
        read += used;
        /* rows left past the cursor: in this read, or past it */
        more = used < rows->n || rows->more;
        troupe_rows_destroy(rows);
    }
    if (e != TROUPE_OK) {
        troupe_gtx_page_destroy(p);
        return e;
    }
    p->more = more;
    *out = p;
    return TROUPE_OK;
}
