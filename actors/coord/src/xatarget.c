/*
 * The built-in target of xa branches (TROUPE_XA_TARGET,
 * troupe/coordinator.h): a callback target the coordinator serves on its
 * own tables. A branch's call names its xid by its header (mode "xa",
 * gid, branch id: the xid "gid/branch-id") and its op: "action" commits
 * the prepared transaction, "rollback" rolls it back (troupe/xa.h; both
 * idempotent, so a delivery twice is harmless). Runs on the HOST lane,
 * where the blocking resolutions may wait for their synced write.
 */
#include <stdio.h>
#include <string.h>

#include "coord_int.h"
#include "troupe/log.h"
#include "troupe/xa.h"

/* The header's four strings: mode, gid, branch id, op. */
static bool
fields(const troupe_task *t, const char *f[4])
{
    size_t off = 0;
    for (int i = 0; i < 4; i++) {
        const uint8_t *z = off < t->header_len
                               ? memchr(t->header + off, 0, t->header_len - off)
                               : NULL;
        if (z == NULL)
            return false;
        f[i] = (const char *)t->header + off;
        off = (size_t)(z - t->header) + 1;
    }
    return off == t->header_len;
}

static troupe_outcome
resolve(const troupe_task *t, troupe_task_reply *r, void *arg)
{
    (void)r;
    troupe_coord *c = arg;
    const char *f[4];
    char xid[TROUPE_GID_MAX + 8];
    if (t->kind != TROUPE_TASK_BRANCH || !fields(t, f) ||
        strcmp(f[0], "xa") != 0 || !troupe_gid_valid(f[1], strlen(f[1])) ||
        !troupe_branch_id_valid(f[2]))
        return TROUPE_OUTCOME_UNKNOWN; /* not an xa branch: never ours */
    int n = snprintf(xid, sizeof(xid), "%s/%s", f[1], f[2]);
    bool commit = strcmp(f[3], "action") == 0;
    if (!commit && strcmp(f[3], "rollback") != 0)
        return TROUPE_OUTCOME_UNKNOWN;
    troupe_err e = commit ? troupe_xa_commit_wait(c->tables, xid, (size_t)n)
                          : troupe_xa_rollback_wait(c->tables, xid, (size_t)n);
    if (e == TROUPE_OK)
        return TROUPE_OUTCOME_SUCCESS;
    if (e == TROUPE_ECONFLICT) /* resolved the other way: never moves on */
        troupe_log(troupe_runtime_logger(c->rt), TROUPE_LOG_ERROR, "coord",
                   "xa %s: %s, but it was resolved the other way already", xid,
                   commit ? "commit" : "rollback");
    return e == TROUPE_ECONFLICT ? TROUPE_OUTCOME_FAILURE
                                 : TROUPE_OUTCOME_UNKNOWN;
}

troupe_err
troupe__coord_xa_target_open(troupe_coord *c)
{
    troupe_target_opts o = {.name = TROUPE_XA_TARGET,
                            .fn = resolve,
                            .arg = c,
                            .credit = TROUPE_TARGET_CREDIT_DEFAULT};
    return troupe_target_create(c->rt, &o, &c->xa_target);
}

void
troupe__coord_xa_target_close(troupe_coord *c)
{
    if (c->xa_target == NULL)
        return;
    (void)troupe_target_stop_wait(c->xa_target);
    troupe_target_destroy(c->xa_target);
    c->xa_target = NULL;
}
