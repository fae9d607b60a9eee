/*
 * troupe gtx: a running node's global transactions (troupe/coordinator.h,
 * docs/coordinator.md), through its admin endpoint (--admin: nothing is
 * opened here, so it works while the node holds the database).
 *
 *   troupe gtx list         GET  /v1/gtx?status=&mode=&limit=&after=
 *   troupe gtx show GID     GET  /v1/gtx/{gid}
 *   troupe gtx abort GID [--reason TEXT]   POST /v1/gtx/{gid}/abort
 *   troupe gtx retry GID    POST /v1/gtx/{gid}/retry
 *   troupe gtx force-stop GID   POST /v1/gtx/{gid}/force-stop
 *   troupe gtx prepared     GET  /v1/xa?limit=&after=
 *
 * There is no --data form: the coordinator is the only reader of the
 * table troupe.gtx the library offers, and opening one drives (writes)
 * the unfinished transactions, which is the node's to do. Flags and
 * operands are checked here against the coordinator's rules (a gid, a
 * status, a mode, an abort reason) so that a typo is a usage error, not a
 * request. show and the actions print a transaction's fields as `name
 * value` lines, then one line per op of each branch:
 *
 *   branch.02.action state=failed attempts=1 last=FAILURE payload_len=2
 *       target=svc
 *
 * (one line; the target last, as a name may hold spaces).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "cli.h"
#include "troupe/coord.h"
#include "troupe/coordinator.h"
#include "troupe/xa.h"

#define ADMIN_REQUIRED                                                         \
    "  --admin URL         the node's admin endpoint (required)\n"
#define TAIL_HELP                                                              \
    "  --admin-token FILE  the endpoint's bearer token\n"                      \
    "  --json              print the endpoint's JSON answer (one line)\n"      \
    "  --log-level LEVEL   error, warn, info or debug (default warn)\n"        \
    "  -h, --help          this help\n"
#define GID_HELP                                                               \
    "GID is 1..128 bytes of A-Z a-z 0-9 _ . : - (the coordinator's rule).\n"

const cli_cmd cli_gtx_cmd = {
    .name = "gtx",
    .synopsis = "gtx list|show|abort|retry|force-stop|prepared [GID] --admin "
                "URL [FLAGS]...",
    .help =
        "A running node's global transactions (sagas, TCC, two-phase\n"
        "messages), through its admin endpoint.\n"
        "\n"
        "Subcommands:\n"
        "  list        a page of transactions in gid order, and the cursor\n"
        "  show        one transaction: status, mode, reason, steps,\n"
        "              attempts, times, next due time, and every branch's\n"
        "              ops\n"
        "  abort       start aborting it (compensations, cancels), with a\n"
        "              reason\n"
        "  retry       run the call waiting out its backoff now\n"
        "  force-stop  fail it now, running nothing more\n"
        "  prepared    the XA branches prepared on the node's tables, with\n"
        "              their ages (a dangling one's coordinator is gone)\n"
        "\n"
        "troupe gtx SUBCOMMAND --help tells each one's flags.\n",
};

enum { G_LIST, G_SHOW, G_ABORT, G_RETRY, G_FORCE_STOP, G_PREPARED, G_N };

static const cli_cmd subs[G_N] = {
    {.name = "gtx list",
     .synopsis = "gtx list --admin URL [--status S] [--mode M] [--limit N]\n"
                 "              [--cursor GID] [--admin-token FILE] [--json]",
     .help = "Prints a page of stored transactions in gid order: gid, mode,\n"
             "status, reason, steps, attempts, times; then the cursor of the\n"
             "next page and whether there is more (a page may hold fewer\n"
             "than --limit, none even, and still say more: the node reads at\n"
             "most ten times the limit per page).\n"
             "\n" ADMIN_REQUIRED
             "  --status S          only those in status S: prepared,\n"
             "                      submitted, aborting, succeed or failed\n"
             "  --mode M            only those of mode M: saga, tcc, msg, xa\n"
             "                      or workflow\n"
             "  --limit N           transactions per page, 1..1000 (default\n"
             "                      100)\n"
             "  --cursor GID        continue after the cursor a page "
             "printed\n" TAIL_HELP},
    {.name = "gtx show",
     .synopsis = "gtx show GID --admin URL [--admin-token FILE] [--json]",
     .help = "Prints one transaction's last committed state: mode, status,\n"
             "reason, steps, attempts (its retries so far), created, updated\n"
             "and finished times, when it is driven next (null: a call in\n"
             "flight, waiting for its submit, or ended), then one line per\n"
             "op of each branch (\"00\" is a message's query-back):\n"
             "\n"
             "  branch.ID.OP state=S attempts=N last=O payload_len=N "
             "target=T\n"
             "\n"
             "S is todo (not called, or to be called again), dispatched,\n"
             "succeeded or failed; O the last outcome heard (SUCCESS,\n"
             "FAILURE, ONGOING, UNKNOWN) or none. A tcc's try is the\n"
             "application's and is not listed.\n"
             "\n" ADMIN_REQUIRED TAIL_HELP "\n" GID_HELP},
    {.name = "gtx abort",
     .synopsis = "gtx abort GID --admin URL [--reason TEXT] "
                 "[--admin-token FILE]\n"
                 "              [--json]",
     .help = "Starts aborting a transaction that has not ended, with the\n"
             "reason \"aborted: TEXT\" (\"aborted\" without --reason): a saga\n"
             "compensates its steps, a tcc cancels its branches, a prepared\n"
             "message fails. One aborting already keeps its first reason. A\n"
             "submitted message only goes forward, and a transaction that\n"
             "has ended cannot be aborted: both are a conflict (exit 1).\n"
             "Prints the state it committed, as show does.\n"
             "\n" ADMIN_REQUIRED
             "  --reason TEXT       why, stored with it: 1..256 bytes of "
             "UTF-8\n"
             "                      without control characters\n" TAIL_HELP
             "\n" GID_HELP},
    {.name = "gtx retry",
     .synopsis = "gtx retry GID --admin URL [--admin-token FILE] [--json]",
     .help = "Runs now the call of a transaction that waits out its backoff\n"
             "(a conflict, exit 1, once it has ended). Prints its state, as\n"
             "show does.\n"
             "\n" ADMIN_REQUIRED TAIL_HELP "\n" GID_HELP},
    {.name = "gtx force-stop",
     .synopsis = "gtx force-stop GID --admin URL [--admin-token FILE] "
                 "[--json]",
     .help = "Fails a transaction that has not ended at once, with the\n"
             "reason \"force-stopped\": no compensation, cancel or step runs\n"
             "from then on. For an operator who has settled it by hand. A\n"
             "conflict (exit 1) once it has ended. Prints its state, as show\n"
             "does.\n"
             "\n" ADMIN_REQUIRED TAIL_HELP "\n" GID_HELP},
    {.name = "gtx prepared",
     .synopsis = "gtx prepared --admin URL [--limit N] [--cursor XID]\n"
                 "              [--admin-token FILE] [--json]",
     .help = "Prints the transactions prepared under an xid on the node's\n"
             "tables (XA branches, troupe/xa.h) in xid order: each xid, when\n"
             "it was prepared and its age. Each holds its keys until it is\n"
             "committed or rolled back; one whose global transaction is gone\n"
             "(dangling) holds them until an operator resolves it. An xa\n"
             "branch's xid is GID/BRANCH-ID.\n"
             "\n" ADMIN_REQUIRED
             "  --limit N           xids per page, 1..1000 (default 100)\n"
             "  --cursor XID        continue after the cursor a page "
             "printed\n" TAIL_HELP},
};

const cli_cmd *
cli_gtx_sub(const char *name)
{
    for (size_t i = 0; i < G_N; i++) {
        if (strcmp(subs[i].name + strlen("gtx "), name) == 0)
            return &subs[i];
    }
    return NULL;
}

enum {
    OPT_STATUS = OPT_FIRST_OWN,
    OPT_MODE,
    OPT_LIMIT,
    OPT_CURSOR,
    OPT_REASON
};

typedef struct gargs {
    const char *status, *mode, *cursor, *gid, *reason;
    long limit;
} gargs;

/* One transaction's answer (show's, an action's): its fields as `name
 * value` lines, then a line per op of each branch; --json: as sent. */
static void
print_state(const cli_admin *a, json_t *j)
{
    if (a->json) {
        cli_admin_print(a, j);
        return;
    }
    json_t *bs = json_incref(json_object_get(j, "branches"));
    json_object_del(j, "branches");
    cli_admin_print(a, j);
    size_t i, k;
    json_t *b, *o;
    json_array_foreach(bs, i, b)
    {
        const char *id = json_string_value(json_object_get(b, "id"));
        json_array_foreach(json_object_get(b, "ops"), k, o)
        {
            const char *op = json_string_value(json_object_get(o, "op"));
            const char *st = json_string_value(json_object_get(o, "state"));
            const char *last = json_string_value(json_object_get(o, "last"));
            json_t *t = json_object_get(o, "target");
            const char *hex = json_string_value(json_object_get(t, "hex"));
            const char *tv = hex ? hex : json_string_value(t);
            printf(
                "branch.%s.%s state=%s attempts=%lld last=%s "
                "payload_len=%lld target%s=%s\n",
                id ? id : "?", op ? op : "?", st ? st : "?",
                (long long)json_integer_value(json_object_get(o, "attempts")),
                last ? last : "none",
                (long long)json_integer_value(
                    json_object_get(o, "payload_len")),
                hex ? "_hex" : "", tv ? tv : "?");
        }
    }
    json_decref(bs);
}

/* s has an xid's form (troupe/xa.h): 1..128 bytes of A-Z a-z 0-9 _ . :
 * - and /. */
static bool
xid_form(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > TROUPE_XA_XID_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] != '/' && !troupe_gid_valid(&s[i], 1))
            return false;
    return true;
}

static int
run(int kind, const cli_admin *a, const gargs *g)
{
    static const char *const op[] = {[G_ABORT] = "abort",
                                     [G_RETRY] = "retry",
                                     [G_FORCE_STOP] = "force-stop"};
    char path[1024];
    if (kind == G_PREPARED) {
        char *cur = g->cursor ? cli_admin_escape(g->cursor) : NULL;
        if (g->cursor != NULL && cur == NULL)
            return cli_failed("request", TROUPE_ENOMEM);
        snprintf(path, sizeof(path), "/v1/xa?limit=%ld%s%s", g->limit,
                 cur ? "&after=" : "", cur ? cur : "");
        free(cur);
        return cli_admin_run(a, "GET", path, NULL);
    }
    if (kind == G_LIST) {
        /* the values passed their rules: nothing in them needs escaping
         * but for the cursor's ':' */
        char *cur = g->cursor ? cli_admin_escape(g->cursor) : NULL;
        if (g->cursor != NULL && cur == NULL)
            return cli_failed("request", TROUPE_ENOMEM);
        snprintf(path, sizeof(path), "/v1/gtx?limit=%ld%s%s%s%s%s%s", g->limit,
                 g->status ? "&status=" : "", g->status ? g->status : "",
                 g->mode ? "&mode=" : "", g->mode ? g->mode : "",
                 cur ? "&after=" : "", cur ? cur : "");
        free(cur);
        return cli_admin_run(a, "GET", path, NULL);
    }
    char *gid = cli_admin_escape(g->gid);
    if (gid == NULL)
        return cli_failed("request", TROUPE_ENOMEM);
    snprintf(path, sizeof(path), "/v1/gtx/%s%s%s", gid,
             kind == G_SHOW ? "" : "/", kind == G_SHOW ? "" : op[kind]);
    free(gid);
    char *body = NULL;
    if (g->reason != NULL) {
        json_t *b = json_pack("{s:s}", "reason", g->reason);
        body = b ? json_dumps(b, JSON_COMPACT) : NULL;
        json_decref(b);
        if (body == NULL)
            return cli_failed("request", TROUPE_ENOMEM);
    }
    json_t *j = NULL;
    int rc =
        cli_admin_request(a, kind == G_SHOW ? "GET" : "POST", path, body, &j);
    free(body);
    if (rc == 0)
        print_state(a, j);
    json_decref(j);
    return rc;
}

/* troupe gtx SUB ...: argv[0] is the subcommand. */
int
cmd_gtx(int argc, char **argv)
{
    const cli_cmd *top = &cli_gtx_cmd, *c = NULL;
    int picked = cli_sub_pick(
        top, argc, argv, "list, show, abort, retry, force-stop or prepared",
        cli_gtx_sub, &c);
    if (picked >= 0)
        return picked;
    int kind = (int)(c - subs);
    /* Each subcommand takes only its own flags: the table ends early. */
    struct option opts[12] = {CLI_COMMON_OPTIONS, CLI_ADMIN_OPTIONS};
    size_t no = 5; /* the entries of the two macros */
    if (kind == G_LIST) {
        opts[no++] =
            (struct option){"status", required_argument, NULL, OPT_STATUS};
        opts[no++] = (struct option){"mode", required_argument, NULL, OPT_MODE};
        opts[no++] =
            (struct option){"limit", required_argument, NULL, OPT_LIMIT};
        opts[no++] =
            (struct option){"cursor", required_argument, NULL, OPT_CURSOR};
    }
    if (kind == G_PREPARED) {
        opts[no++] =
            (struct option){"limit", required_argument, NULL, OPT_LIMIT};
        opts[no++] =
            (struct option){"cursor", required_argument, NULL, OPT_CURSOR};
    }
    if (kind == G_ABORT)
        opts[no++] =
            (struct option){"reason", required_argument, NULL, OPT_REASON};
    opts[no] = (struct option){NULL, 0, NULL, 0};
    gargs g = {.limit = 100};
    static cli_admin adm;
    memset(&adm, 0, sizeof(adm));
    troupe_log_level level = TROUPE_LOG_DEFAULT;
    cli_getopt_reset();
    int ch, rc;
    while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (ch) {
        case OPT_STATUS:
            if (admin_gtx_status_of(optarg) == 0)
                return cli_usage(c,
                                 "--status wants prepared, submitted, "
                                 "aborting, succeed or failed, got '%s'",
                                 optarg);
            g.status = optarg;
            break;
        case OPT_MODE:
            if (troupe_gtx_mode_of(optarg) == 0)
                return cli_usage(c,
                                 "--mode wants saga, tcc, msg, xa or "
                                 "workflow, got '%s'",
                                 optarg);
            g.mode = optarg;
            break;
        case OPT_LIMIT:
            if (!cli_num(c, "--limit", optarg, 1, TROUPE_GTX_LIST_MAX,
                         &g.limit))
                return CLI_USAGE;
            break;
        case OPT_CURSOR: /* an xid is a gid, or gid/branch-id */
            if (kind == G_PREPARED ? !xid_form(optarg)
                                   : !troupe_gid_valid(optarg, strlen(optarg)))
                return cli_usage(c,
                                 "--cursor wants the cursor a page printed "
                                 "(a gid), got '%s'",
                                 optarg);
            g.cursor = optarg;
            break;
        case OPT_REASON:
            if (!troupe_gtx_abort_reason_valid(optarg, strlen(optarg)))
                return cli_usage(c,
                                 "--reason wants 1..%d bytes of UTF-8 "
                                 "without control characters",
                                 TROUPE_GTX_ABORT_REASON_MAX);
            g.reason = optarg;
            break;
        default:
            if ((rc = cli_admin_common_flag(&adm, c, ch, argv, &level)) !=
                CLI_CONTINUE)
                return rc;
        }
    }
    /* argv[0] is the subcommand, which getopt_long skips as it would a
     * program name; the gid is the one operand of the others. */
    bool pages = kind == G_LIST || kind == G_PREPARED;
    if ((rc = cli_operands(c, argc, argv, pages ? 0 : 1,
                           "which transaction? give its GID")) != CLI_CONTINUE)
        return rc;
    if (!pages) {
        g.gid = argv[optind];
        if (!troupe_gid_valid(g.gid, strlen(g.gid)))
            return cli_usage(c,
                             "'%s' is not a gid: 1..%d bytes of A-Z a-z 0-9 "
                             "_ . : -",
                             g.gid, TROUPE_GID_MAX);
    }
    if ((rc = cli_admin_ready(&adm, c)) != CLI_CONTINUE)
        return rc;
    if (!adm.on)
        return cli_usage(c, "--admin URL is required (a running node)");
    return run(kind, &adm, &g);
}
