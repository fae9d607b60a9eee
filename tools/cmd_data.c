/*
 * troupe table, troupe index, troupe kv: a running node's rows, indexes
 * and kv values, through its admin endpoint (--admin: they open nothing,
 * so they work while the node holds the database).
 *
 *   troupe table get|scan   GET /v1/tables/{t}/row, /scan
 *   troupe index state|rebuild   GET /v1/tables/{t}/indexes/{i}, POST
 * .../rebuild troupe kv get|put       GET /v1/kv, PUT /v1/kv
 *
 * Documents print as JSON (the endpoint converts them), as `path value`
 * lines or, with --json, the answer itself.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define ADMIN_REQUIRED                                                         \
    "  --admin URL         the node's admin endpoint (required)\n"
#define TAIL_HELP                                                              \
    "  --admin-token FILE  the endpoint's bearer token\n"                      \
    "  --json              print the endpoint's JSON answer (one line)\n"      \
    "  --log-level LEVEL   error, warn, info or debug (default warn)\n"        \
    "  -h, --help          this help\n"
#define KEY_HELP                                                               \
    "  --key KEY           the key as text\n"                                  \
    "  --key-hex HEX       the key as hex digits\n"

const cli_cmd cli_table_cmd = {
    .name = "table",
    .synopsis = "table get|scan --admin URL --table NAME [FLAGS]...",
    .help = "A running node's rows, through its admin endpoint.\n"
            "\n"
            "Subcommands:\n"
            "  get         one live row: key, document (as JSON), expiry\n"
            "  scan        a page of rows in key order, and the cursor\n",
};
const cli_cmd cli_index_cmd = {
    .name = "index",
    .synopsis = "index state|rebuild --admin URL --table NAME --index NAME",
    .help = "A running node's indexes, through its admin endpoint.\n"
            "\n"
            "Subcommands:\n"
            "  state       ready or building\n"
            "  rebuild     rebuild it online (waits until it is ready)\n",
};
const cli_cmd cli_kv_cmd = {
    .name = "kv",
    .synopsis = "kv get|put --admin URL (--key KEY | --key-hex HEX) "
                "[--value V]",
    .help = "The running node's kv actor, through its admin endpoint.\n"
            "\n"
            "Subcommands:\n"
            "  get         a value\n"
            "  put         store one (synced)\n",
};

enum {
    D_TABLE_GET,
    D_TABLE_SCAN,
    D_INDEX_STATE,
    D_INDEX_REBUILD,
    D_KV_GET,
    D_KV_PUT,
    D_N
};

static const cli_cmd subs[D_N] = {
    {.name = "table get",
     .synopsis = "table get --admin URL --table NAME (--key KEY | --key-hex "
                 "HEX)\n"
                 "              [--admin-token FILE] [--json]",
     .help = "Prints one live row: its key, its document as JSON and its\n"
             "expiry (ISO 8601, or null).\n"
             "\n" ADMIN_REQUIRED
             "  --table NAME        the table (required)\n" KEY_HELP TAIL_HELP},
    {.name = "table scan",
     .synopsis = "table scan --admin URL --table NAME [--limit N]\n"
                 "              [--after CURSOR-HEX] [--reverse] "
                 "[--admin-token FILE] [--json]",
     .help = "Prints a page of live rows in key order and the cursor of the\n"
             "next page.\n"
             "\n" ADMIN_REQUIRED "  --table NAME        the table (required)\n"
             "  --limit N           rows per page, 1..10000 (default 100)\n"
             "  --after CURSOR-HEX  continue after the cursor a page printed\n"
             "  --reverse           descending key order\n" TAIL_HELP},
    {.name = "index state",
     .synopsis = "index state --admin URL --table NAME --index NAME\n"
                 "              [--admin-token FILE] [--json]",
     .help = "Prints whether the index is ready or still building.\n"
             "\n" ADMIN_REQUIRED "  --table NAME        the table (required)\n"
             "  --index NAME        the index (required)\n" TAIL_HELP},
    {.name = "index rebuild",
     .synopsis = "index rebuild --admin URL --table NAME --index NAME\n"
                 "              [--wait] [--admin-token FILE] [--json]",
     .help =
         "Rebuilds the index online (writes go on) and returns when it\n"
         "is ready; queries on it fail while it builds.\n"
         "\n" ADMIN_REQUIRED "  --table NAME        the table (required)\n"
         "  --index NAME        the index (required)\n"
         "  --wait              show the build's progress until it is\n"
         "                      ready: one line updated in place on a\n"
         "                      terminal, else a line per change\n"
         "                      (`rows N total N elapsed_ms N`)\n" TAIL_HELP},
    {.name = "kv get",
     .synopsis = "kv get --admin URL (--key KEY | --key-hex HEX)\n"
                 "              [--admin-token FILE] [--json]",
     .help = "Prints the value at the key.\n"
             "\n" ADMIN_REQUIRED KEY_HELP TAIL_HELP},
    {.name = "kv put",
     .synopsis = "kv put --admin URL (--key KEY | --key-hex HEX)\n"
                 "              (--value V | --value-hex HEX) "
                 "[--admin-token FILE] [--json]",
     .help = "Stores the value at the key (synced).\n"
             "\n" ADMIN_REQUIRED KEY_HELP
             "  --value V           the value as text\n"
             "  --value-hex HEX     the value as hex digits\n" TAIL_HELP},
};

enum {
    OPT_TABLE = OPT_FIRST_OWN,
    OPT_INDEX,
    OPT_KEY,
    OPT_KEY_HEX,
    OPT_VALUE,
    OPT_VALUE_HEX,
    OPT_LIMIT,
    OPT_AFTER,
    OPT_REVERSE,
    OPT_WAIT
};

typedef struct dargs {
    const char *table, *index, *key, *key_hex, *value, *value_hex, *after;
    long limit;
    bool reverse;
    bool wait;
} dargs;

/* "name" (text) or {"hex": "..."}: a byte field of a request body. */
static json_t *
bytes_field(const char *text, const char *hex)
{
    return text ? json_string(text) : json_pack("{s:s}", "hex", hex);
}

/* How often rebuild --wait asks the node for the build's progress. */
#define PROGRESS_POLL_MS 200

/* The integer field `name` of j (0 when absent). */
static long long
jnum(json_t *j, const char *name)
{
    return (long long)json_integer_value(json_object_get(j, name));
}

/* rebuild --wait: starts the rebuild, then prints its progress from the
 * index route until the index is ready under the new id the rebuild gave
 * it (0), or the build failed. */
static int
rebuild_wait(const cli_admin *a, const char *t, const char *i)
{
    char path[16384], start[16400];
    snprintf(path, sizeof(path), "/v1/tables/%s/indexes/%s", t, i);
    json_t *j = NULL;
    int rc = cli_admin_request(a, "GET", path, NULL, &j);
    long long old_id = jnum(j, "id");
    json_decref(j);
    if (rc != 0)
        return rc;
    snprintf(start, sizeof(start), "%s/rebuild?wait=0", path);
    if ((rc = cli_admin_request(a, "POST", start, NULL, &j)) != 0)
        return rc;
    json_decref(j);
    bool tty = isatty(STDOUT_FILENO) && !a->json;
    long long shown = -1;
    for (;;) {
        if ((rc = cli_admin_request(a, "GET", path, NULL, &j)) != 0)
            return rc;
        /* the old id still ready: the rebuild's catalog job has not run */
        const char *st = json_string_value(json_object_get(j, "state"));
        if (jnum(j, "id") == old_id) {
            json_decref(j);
            struct timespec ts = {0, PROGRESS_POLL_MS * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        bool ready = st != NULL && strcmp(st, "ready") == 0;
        json_t *p = json_object_get(j, "progress");
        long long rows = jnum(p, "rows"), total = jnum(p, "total");
        const char *err = json_string_value(json_object_get(p, "error"));
        if (a->json) {
            if (rows != shown || ready || err != NULL)
                cli_admin_print(a, j);
        } else if (tty) {
            printf("\r%lld / %lld rows (%lld%%) %.1f s%s", rows, total,
                   total > 0 ? rows * 100 / total : 0,
                   (double)jnum(p, "elapsed_ms") / 1e3, ready ? "\n" : "");
        } else if (rows != shown || ready) {
            printf("%srows %lld total %lld elapsed_ms %lld\n",
                   ready ? "ready " : "", rows, total, jnum(p, "elapsed_ms"));
        }
        fflush(stdout);
        shown = rows;
        bool failed =
            err != NULL && json_is_false(json_object_get(p, "running"));
        if (failed) {
            if (tty)
                putchar('\n');
            fprintf(stderr, "troupe index rebuild: the build failed: %s\n",
                    err);
        }
        json_decref(j);
        if (ready)
            return 0;
        if (failed)
            return CLI_FAIL;
        struct timespec ts = {0, PROGRESS_POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static int
run(int kind, const cli_admin *a, const dargs *d)
{
    char *t = d->table ? cli_admin_escape(d->table) : NULL;
    char *i = d->index ? cli_admin_escape(d->index) : NULL;
    char *k = d->key       ? cli_admin_escape(d->key)
              : d->key_hex ? cli_admin_escape(d->key_hex)
                           : NULL;
    char *af = d->after ? cli_admin_escape(d->after) : NULL;
    char path[16384];
    const char *method = "GET";
    char *body = NULL;
    const char *kq = d->key ? "key" : "key_hex";
    switch (kind) {
    case D_TABLE_GET:
        snprintf(path, sizeof(path), "/v1/tables/%s/row?%s=%s", t, kq, k);
        break;
    case D_TABLE_SCAN:
        snprintf(path, sizeof(path), "/v1/tables/%s/scan?limit=%ld%s%s%s", t,
                 d->limit, d->reverse ? "&reverse=1" : "", af ? "&after=" : "",
                 af ? af : "");
        break;
    case D_INDEX_STATE:
    case D_INDEX_REBUILD:
        if (kind == D_INDEX_REBUILD && d->wait) {
            int rc = rebuild_wait(a, t, i);
            free(t);
            free(i);
            free(k);
            free(af);
            return rc;
        }
        snprintf(path, sizeof(path), "/v1/tables/%s/indexes/%s%s", t, i,
                 kind == D_INDEX_REBUILD ? "/rebuild" : "");
        method = kind == D_INDEX_REBUILD ? "POST" : "GET";
        break;
    case D_KV_GET:
        snprintf(path, sizeof(path), "/v1/kv?%s=%s", kq, k);
        break;
    default: {
        json_t *b =
            json_pack("{s:o,s:o}", "key", bytes_field(d->key, d->key_hex),
                      "value", bytes_field(d->value, d->value_hex));
        body = b ? json_dumps(b, JSON_COMPACT) : NULL;
        json_decref(b);
        snprintf(path, sizeof(path), "/v1/kv");
        method = "PUT";
        break;
    }
    }
    int rc = cli_admin_run(a, method, path, body);
    free(body);
    free(t);
    free(i);
    free(k);
    free(af);
    return rc;
}

/* troupe table|index|kv SUB ...: argv[0] is the subcommand. */
static int
cmd_data(const cli_cmd *top, int first, int last, int argc, char **argv)
{
    if (argc < 1)
        return cli_usage(top, "which subcommand?");
    const char *sub = argv[0];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0)
        return cli_help(top);
    int kind = -1;
    for (int k = first; k <= last; k++)
        if (strcmp(subs[k].name + strlen(top->name) + 1, sub) == 0)
            kind = k;
    if (kind < 0)
        return cli_usage(top, "unknown subcommand '%s'", sub);
    const cli_cmd *c = &subs[kind];
    struct option opts[16] = {CLI_COMMON_OPTIONS, CLI_ADMIN_OPTIONS};
    size_t no = 5; /* the entries of the two macros */
    bool tbl = kind <= D_INDEX_REBUILD,
         keyed = kind == D_TABLE_GET || kind >= D_KV_GET;
    if (tbl)
        opts[no++] =
            (struct option){"table", required_argument, NULL, OPT_TABLE};
    if (kind == D_INDEX_STATE || kind == D_INDEX_REBUILD)
        opts[no++] =
            (struct option){"index", required_argument, NULL, OPT_INDEX};
    if (kind == D_INDEX_REBUILD)
        opts[no++] = (struct option){"wait", no_argument, NULL, OPT_WAIT};
    if (keyed) {
        opts[no++] = (struct option){"key", required_argument, NULL, OPT_KEY};
        opts[no++] =
            (struct option){"key-hex", required_argument, NULL, OPT_KEY_HEX};
    }
    if (kind == D_KV_PUT) {
        opts[no++] =
            (struct option){"value", required_argument, NULL, OPT_VALUE};
        opts[no++] = (struct option){"value-hex", required_argument, NULL,
                                     OPT_VALUE_HEX};
    }
    if (kind == D_TABLE_SCAN) {
        opts[no++] =
            (struct option){"limit", required_argument, NULL, OPT_LIMIT};
        opts[no++] =
            (struct option){"after", required_argument, NULL, OPT_AFTER};
        opts[no++] = (struct option){"reverse", no_argument, NULL, OPT_REVERSE};
    }
    opts[no] = (struct option){NULL, 0, NULL, 0};
    dargs d = {.limit = 100};
    static cli_admin adm;
    memset(&adm, 0, sizeof(adm));
    troupe_log_level level = TROUPE_LOG_DEFAULT;
    cli_getopt_reset();
    int ch, rc;
    while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (ch) {
        case OPT_TABLE:
            d.table = optarg;
            break;
        case OPT_INDEX:
            d.index = optarg;
            break;
        case OPT_KEY:
            d.key = optarg;
            break;
        case OPT_KEY_HEX:
            d.key_hex = optarg;
            break;
        case OPT_VALUE:
            d.value = optarg;
            break;
        case OPT_VALUE_HEX:
            d.value_hex = optarg;
            break;
        case OPT_LIMIT:
            if (!cli_num(c, "--limit", optarg, 1, 10000, &d.limit))
                return CLI_USAGE;
            break;
        case OPT_AFTER:
            d.after = optarg;
            break;
        case OPT_REVERSE:
            d.reverse = true;
            break;
        case OPT_WAIT:
            d.wait = true;
            break;
        default:
            if ((rc = cli_admin_common_flag(&adm, c, ch, argv, &level)) !=
                CLI_CONTINUE)
                return rc;
        }
    }
    if ((rc = cli_operands(c, argc, argv, 0, "")) != CLI_CONTINUE)
        return rc;
    if ((rc = cli_admin_ready(&adm, c)) != CLI_CONTINUE)
        return rc;
    if (!adm.on)
        return cli_usage(c, "--admin URL is required (a running node)");
    if (tbl && d.table == NULL)
        return cli_usage(c, "--table is required");
    if ((kind == D_INDEX_STATE || kind == D_INDEX_REBUILD) && d.index == NULL)
        return cli_usage(c, "--index is required");
    if (keyed && (d.key == NULL) == (d.key_hex == NULL))
        return cli_usage(c, "give --key or --key-hex (one of them)");
    if (kind == D_KV_PUT && (d.value == NULL) == (d.value_hex == NULL))
        return cli_usage(c, "give --value or --value-hex (one of them)");
    return run(kind, &adm, &d);
}

int
cmd_table(int argc, char **argv)
{
    return cmd_data(&cli_table_cmd, D_TABLE_GET, D_TABLE_SCAN, argc, argv);
}

int
cmd_index(int argc, char **argv)
{
    return cmd_data(&cli_index_cmd, D_INDEX_STATE, D_INDEX_REBUILD, argc, argv);
}

int
cmd_kv(int argc, char **argv)
{
    return cmd_data(&cli_kv_cmd, D_KV_GET, D_KV_PUT, argc, argv);
}

const cli_cmd *
cli_data_sub(const char *cmd, const char *name)
{
    for (int k = 0; k < D_N; k++) {
        size_t n = strlen(cmd);
        if (strncmp(subs[k].name, cmd, n) == 0 && subs[k].name[n] == ' ' &&
            strcmp(subs[k].name + n + 1, name) == 0)
            return &subs[k];
    }
    return NULL;
}
