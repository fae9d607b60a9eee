/*
 * troupe stats: a database's figures.
 *
 * The database is opened read-only (storage.h: nothing is written, and a
 * running node may hold it) and each column family's figures are printed;
 * with --tables the tables are opened on it read-only too (table.h,
 * troupe_tables_open: no commit pipeline, no `meta` created, no version
 * floor stored, no build resumed) and their counters printed.
 *
 * With --admin the figures come from a running node's admin endpoint
 * (GET /v1/db, /v1/tables): the node's live view, tables included.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "troupe/alloc.h"
#include "troupe/storage.h"
#include "troupe/table.h"

const cli_cmd cli_stats_cmd = {
    .name = "stats",
    .synopsis = "stats (--data DIR | --admin URL [--admin-token FILE] "
                "[--json])\n"
                "              [--tables] [--log-level LEVEL]",
    .help =
        "Prints the figures of the database under DIR, one `key value...`\n"
        "line each. It opens the database read-only: nothing is written, and\n"
        "it works while a node holds the database (the figures are those of\n"
        "the moment it opened). Per column family: RocksDB's estimate of its\n"
        "keys, its live bytes, its table-file bytes and its memtable bytes.\n"
        "\n"
        "  --data DIR          the database directory (required; must hold\n"
        "                      a database)\n"
        "  --tables            print the tables' counters instead (the\n"
        "                      catalog, key versions, transactions), from\n"
        "                      the tables opened read-only: nothing is\n"
        "                      written, and it works while a node holds the\n"
        "                      database. Key versions and counters live in\n"
        "                      memory: this shows this process's view, zeros\n"
        "                      but for the catalog\n" CLI_ADMIN_HELP
        "                      (with --tables: the node's live counters)\n"
        "  --log-level LEVEL   error, warn, info or debug (default warn)\n"
        "  -h, --help          this help\n",
};

/* The node's figures through its admin endpoint: the family lines of
 * stats_storage, or the tables' answer as lines. */
static int
stats_admin(const cli_admin *a, bool tables)
{
    if (tables)
        return cli_admin_run(a, "GET", "/v1/tables", NULL);
    json_t *j = NULL;
    int rc = cli_admin_request(a, "GET", "/v1/db", NULL, &j);
    if (rc != 0)
        return rc;
    if (a->json) {
        cli_admin_print(a, j);
    } else {
        json_t *fam = json_object_get(j, "families");
        printf("families %zu\n", json_array_size(fam));
        size_t i;
        json_t *f;
        json_array_foreach(fam, i, f)
        {
            printf("family %s keys %" JSON_INTEGER_FORMAT
                   " live_bytes %" JSON_INTEGER_FORMAT
                   " file_bytes %" JSON_INTEGER_FORMAT
                   " mem_bytes %" JSON_INTEGER_FORMAT "\n",
                   json_string_value(json_object_get(f, "name")),
                   json_integer_value(json_object_get(f, "keys")),
                   json_integer_value(json_object_get(f, "live_bytes")),
                   json_integer_value(json_object_get(f, "file_bytes")),
                   json_integer_value(json_object_get(f, "mem_bytes")));
        }
    }
    json_decref(j);
    return 0;
}

enum { OPT_DATA = OPT_FIRST_OWN, OPT_TABLES };

static void
print_tables(const troupe_tables_stats *s)
{
    printf("tables %zu\n", s->n);
    for (size_t i = 0; i < s->n; i++)
        printf("table %s version_records %" PRIu64 " version_bytes %" PRIu64
               " version_evicted %" PRIu64 "\n",
               s->tables[i].name, s->tables[i].version_records,
               s->tables[i].version_bytes, s->tables[i].version_evicted);
    printf("txn created %" PRIu64 " closed %" PRIu64 " running %" PRIu64 "\n",
           s->txn_created, s->txn_closed, s->txn_running);
    printf("query_version ok %" PRIu64 " failed %" PRIu64 "\n", s->qver_ok,
           s->qver_failed);
    printf("versioned_prepare ok %" PRIu64 " failed %" PRIu64 "\n",
           s->vprepare_ok, s->vprepare_failed);
    printf("versioned_commit ok %" PRIu64 " failed %" PRIu64 "\n",
           s->vcommit_ok, s->vcommit_failed);
}

/* Opens data read-only (ENOENT said as "no database"): 0 or CLI_FAIL. */
static int
open_ro(const char *data, const troupe_logger *lg, troupe_db **db)
{
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    o.read_only = true;
    o.logger = *lg;
    troupe_err e = troupe_db_open(data, &o, db);
    if (e == TROUPE_ENOENT) {
        fprintf(stderr, "troupe stats: no database at %s\n", data);
        return CLI_FAIL;
    }
    return e == TROUPE_OK ? 0 : cli_failed("open database", e);
}

static int
stats_tables(const char *data, const troupe_logger *lg)
{
    troupe_db *db = NULL;
    troupe_runtime *rt = NULL;
    troupe_tables *tables = NULL;
    troupe_tables_stats *st = NULL;
    int rc = open_ro(data, lg, &db);
    if (rc != 0)
        return rc;
    troupe_runtime_opts ro = {.logger = *lg};
    troupe_err e = troupe_runtime_create(&rt, &ro);
    if (e != TROUPE_OK) {
        rc = cli_failed("start", e);
        goto out;
    }
    troupe_catalog_opts co = {.rt = rt, .db = db};
    troupe_catalog *cat = NULL;
    if ((e = troupe_catalog_open(&co, &cat)) != TROUPE_OK) {
        rc = cli_failed("open catalog", e);
        goto out_rt;
    }
    troupe_tables_opts to = {.catalog = cat}; /* read-only: no pipeline */
    if ((e = troupe_tables_open(&to, &tables)) != TROUPE_OK) {
        rc = cli_failed("open tables", e);
        goto out_cat;
    }
    if ((e = troupe_tables_stats_wait(tables, &st)) != TROUPE_OK)
        rc = cli_failed("stats", e);
    else
        print_tables(st);
    troupe_tables_stats_destroy(st);
    troupe_tables_stop_wait(tables);
    troupe_tables_destroy(tables);
out_cat:
    troupe_catalog_stop_wait(cat);
    troupe_catalog_destroy(cat);
out_rt:
    troupe_runtime_shutdown_wait(rt);
    troupe_runtime_destroy(rt);
out:
    troupe_db_close(db);
    return rc;
}

static int
stats_storage(const char *data, const troupe_logger *lg)
{
    troupe_db *db = NULL;
    int rc = open_ro(data, lg, &db);
    if (rc != 0)
        return rc;
    char **names = NULL;
    size_t n = 0;
    troupe_err e;
    if ((e = troupe_db_cf_names(db, &names, &n)) != TROUPE_OK) {
        rc = cli_failed("list families", e);
    } else {
        printf("families %zu\n", n);
        for (size_t i = 0; i < n && rc == 0; i++) {
            troupe_cf *cf = NULL;
            troupe_cf_stats st;
            if ((e = troupe_db_cf(db, names[i], &cf)) != TROUPE_OK ||
                (e = troupe_db_cf_stats(db, cf, &st)) != TROUPE_OK) {
                rc = cli_failed("family figures", e);
                break;
            }
            printf("family %s keys %" PRIu64 " live_bytes %" PRIu64
                   " file_bytes %" PRIu64 " mem_bytes %" PRIu64 "\n",
                   names[i], st.keys, st.live_bytes, st.file_bytes,
                   st.mem_bytes);
        }
    }
    troupe_free(names);
    e = troupe_db_close(db);
    if (e != TROUPE_OK && rc == 0)
        rc = cli_failed("close database", e);
    return rc;
}

int
cmd_stats(int argc, char **argv)
{
    const cli_cmd *c = &cli_stats_cmd;
    static const struct option opts[] = {
        {"data", required_argument, NULL, OPT_DATA},
        {"tables", no_argument, NULL, OPT_TABLES},
        CLI_ADMIN_OPTIONS,
        CLI_COMMON_OPTIONS,
        {NULL, 0, NULL, 0}};
    const char *data = NULL;
    bool tables = false;
    static cli_admin adm;
    memset(&adm, 0, sizeof(adm));
    troupe_log_level level = TROUPE_LOG_DEFAULT;
    cli_getopt_reset();
    int ch, rc;
    while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (ch) {
        case OPT_DATA:
            data = optarg;
            break;
        case OPT_TABLES:
            tables = true;
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
    if ((data == NULL) == !adm.on)
        return cli_usage(c, "give --data DIR or --admin URL (one of them)");
    if (adm.on)
        return stats_admin(&adm, tables);
    if (access(data, F_OK) != 0) {
        fprintf(stderr, "troupe stats: no database at %s\n", data);
        return CLI_FAIL;
    }
    troupe_logger lg = {.level = level};
    return tables ? stats_tables(data, &lg) : stats_storage(data, &lg);
}
