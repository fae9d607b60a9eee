/*
 * troupe cluster: what etcd holds for a cluster (docs/cluster.md).
 *
 *   troupe cluster nodes --etcd URLS   the registered nodes, by id
 *   troupe cluster map --etcd URLS     the partition map and its revision
 *   troupe cluster assign UNIT NODE --etcd URLS [--revision REV] [--force]
 *                                      give a unit to a node (a
 *                                      compare-and-set on the map's
 *                                      revision, troupe/map.h)
 *
 * It talks to etcd only (troupe/etcd.h), never to a node.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "troupe/etcd.h"
#include "troupe/map.h"
#include "troupe/member.h"

const cli_cmd cli_cluster_cmd = {
    .name = "cluster",
    .synopsis = "cluster nodes|map|assign [UNIT NODE] --etcd URLS [FLAGS]...",
    .help = "What etcd holds for a cluster of troupe nodes.\n"
            "\n"
            "Subcommands:\n"
            "  nodes       the nodes registered now (each under a lease it\n"
            "              keeps alive: a node that died is gone once its\n"
            "              lease expired), one line each in id order: id,\n"
            "              listen URL, lease\n"
            "  map         the partition map: its revision, then each unit\n"
            "              and the node that owns it\n"
            "  assign      give a unit to a node, as a compare-and-set on\n"
            "              the map's revision\n"
            "\n"
            "troupe cluster SUBCOMMAND --help tells each one's flags.\n",
};

static const cli_cmd sub_nodes = {
    .name = "cluster nodes",
    .synopsis = "cluster nodes --etcd URLS [--timeout MS]",
    .help = "Prints the nodes registered in etcd under /troupe/nodes/, one\n"
            "line each, in id order: \"ID LISTEN-URL lease=HEX\". An entry\n"
            "that is not what a node writes is reported on stderr (exit\n"
            "status 1), the others still printed.\n"
            "\n"
            "  --etcd URLS          etcd's client URLs, comma-separated\n"
            "                       (http://HOST:PORT; required)\n"
            "  --timeout MS         for the request, 1..600000 (default "
            "5000)\n"
            "  --log-level LEVEL    error, warn, info or debug (default warn)\n"
            "  -h, --help           this help\n",
};

static const cli_cmd sub_map = {
    .name = "cluster map",
    .synopsis = "cluster map --etcd URLS [--timeout MS]",
    .help = "Prints the partition map held in etcd (/troupe/map): a line\n"
            "\"revision REV\" (the etcd revision of the map's last change; 0:\n"
            "no map yet), then \"UNIT NODE\" for each assigned unit in unit\n"
            "order. A stored map that troupe did not write is an error.\n"
            "\n"
            "  --etcd URLS          etcd's client URLs, comma-separated\n"
            "                       (http://HOST:PORT; required)\n"
            "  --timeout MS         for each request, 1..600000 (default "
            "5000)\n"
            "  --log-level LEVEL    error, warn, info or debug (default warn)\n"
            "  -h, --help           this help\n",
};

static const cli_cmd sub_assign = {
    .name = "cluster assign",
    .synopsis = "cluster assign UNIT NODE --etcd URLS [--revision REV] "
                "[--force]\n"
                "              [--timeout MS]",
    .help = "Gives UNIT to node NODE in the partition map (moving it if\n"
            "another node owns it) and prints the map's new revision. A\n"
            "UNIT is table:NAME:SHARD, queue:NAME:PARTITION or coord:SHARD\n"
            "(NAME: 1..64 of A-Z a-z 0-9 _ . -; SHARD: 0..65535). The change\n"
            "is a compare-and-set on the map's revision: with --revision it\n"
            "is made only if the map is still at REV (exit 1 when another\n"
            "change came first); without, from the map as read now, read\n"
            "again when another change lands in between.\n"
            "\n"
            "  --etcd URLS          etcd's client URLs, comma-separated\n"
            "                       (http://HOST:PORT; required)\n"
            "  --revision REV       only if the map is at REV (as `cluster\n"
            "                       map` printed it; 0: no map yet)\n"
            "  --force              assign to a node that is not registered\n"
            "                       (up) now\n"
            "  --timeout MS         for each request, 1..600000 (default "
            "5000)\n"
            "  --log-level LEVEL    error, warn, info or debug (default warn)\n"
            "  -h, --help           this help\n",
};

static const cli_cmd *
find_sub(const char *name)
{
    if (strcmp(name, "nodes") == 0)
        return &sub_nodes;
    if (strcmp(name, "map") == 0)
        return &sub_map;
    if (strcmp(name, "assign") == 0)
        return &sub_assign;
    return NULL;
}

enum { OPT_ETCD = OPT_FIRST_OWN, OPT_TIMEOUT, OPT_REVISION, OPT_FORCE };

static int
cmp_info(const void *a, const void *b)
{
    uint32_t x = ((const troupe_member_info *)a)->id;
    uint32_t y = ((const troupe_member_info *)b)->id;
    return (x > y) - (x < y);
}

static int
list_nodes(troupe_etcd *etcd)
{
    troupe_etcd_result r;
    troupe_err e = troupe_etcd_list_wait(etcd, TROUPE_MEMBER_PREFIX,
                                         strlen(TROUPE_MEMBER_PREFIX),
                                         TROUPE_ETCD_LIST_MAX, &r);
    if (e != TROUPE_OK)
        return cli_failed("list the nodes in etcd", e);
    int rc = 0;
    troupe_member_info *v = calloc(r.n ? r.n : 1, sizeof(*v));
    if (v == NULL) {
        troupe_etcd_result_fini(&r);
        return cli_failed("list", TROUPE_ENOMEM);
    }
    size_t n = 0;
    for (size_t i = 0; i < r.n; i++) {
        if (troupe_member_parse(&r.kvs[i], &v[n]) == TROUPE_OK) {
            n++;
            continue;
        }
        fprintf(stderr, "troupe cluster nodes: %.*s is not a node's entry\n",
                (int)(r.kvs[i].key_len > 200 ? 200 : r.kvs[i].key_len),
                (const char *)r.kvs[i].key);
        rc = CLI_FAIL;
    }
    if (r.more) {
        fprintf(stderr,
                "troupe cluster nodes: more than %d entries; the "
                "first are printed\n",
                TROUPE_ETCD_LIST_MAX);
        rc = CLI_FAIL;
    }
    troupe_etcd_result_fini(&r);
    qsort(v, n, sizeof(*v), cmp_info);
    for (size_t i = 0; i < n; i++)
        printf("%u %s lease=%llx\n", v[i].id, v[i].listen,
               (unsigned long long)v[i].lease);
    free(v);
    return rc;
}

static int
print_map(troupe_etcd *etcd)
{
    troupe_map m;
    troupe_err e = troupe_map_read_wait(etcd, &m);
    if (e == TROUPE_EPROTO) {
        fprintf(stderr,
                "troupe cluster map: the map stored at %s is not one "
                "troupe writes\n",
                TROUPE_MAP_KEY);
        return CLI_FAIL;
    }
    if (e != TROUPE_OK)
        return cli_failed("read the map from etcd", e);
    printf("revision %lld\n", (long long)m.revision);
    for (size_t i = 0; i < m.n; i++)
        printf("%s %u\n", m.units[i].unit, m.units[i].node);
    troupe_map_fini(&m);
    return 0;
}

static int
assign(troupe_etcd *etcd, const char *unit, uint32_t node, int64_t rev,
       bool force)
{
    if (!force) {
        char key[64];
        snprintf(key, sizeof(key), TROUPE_MEMBER_PREFIX "%u", node);
        troupe_etcd_result r;
        troupe_err e = troupe_etcd_get_wait(etcd, key, strlen(key), &r);
        if (e != TROUPE_OK)
            return cli_failed("look the node up in etcd", e);
        size_t n = r.n;
        troupe_etcd_result_fini(&r);
        if (n == 0) {
            fprintf(stderr,
                    "troupe cluster assign: node %u is not registered (not "
                    "up): --force to assign to it anyway\n",
                    node);
            return CLI_FAIL;
        }
    }
    int64_t now = 0;
    troupe_err e = troupe_map_assign_wait(etcd, unit, node, rev, &now);
    if (e == TROUPE_ECONFLICT) {
        fprintf(stderr,
                rev >= 0 ? "troupe cluster assign: the map is no longer at "
                           "revision %lld (another change came first): "
                           "nothing changed\n"
                         : "troupe cluster assign: the map kept changing "
                           "under the assign (%lld): nothing changed\n",
                (long long)rev);
        return CLI_FAIL;
    }
    if (e == TROUPE_EPROTO) {
        fprintf(stderr,
                "troupe cluster assign: the map stored at %s is not "
                "one troupe writes: nothing changed\n",
                TROUPE_MAP_KEY);
        return CLI_FAIL;
    }
    if (e != TROUPE_OK)
        return cli_failed("assign", e);
    printf("%s -> %u at revision %lld\n", unit, node, (long long)now);
    return 0;
}

int
cmd_cluster(int argc, char **argv)
{
    const cli_cmd *top = &cli_cluster_cmd, *c = NULL;
    int picked =
        cli_sub_pick(top, argc, argv, "nodes, map or assign", find_sub, &c);
    if (picked >= 0)
        return picked;
    /* Each subcommand takes only its own flags: the table ends early. */
    struct option opts[8] = {CLI_COMMON_OPTIONS,
                             {"etcd", required_argument, NULL, OPT_ETCD},
                             {"timeout", required_argument, NULL, OPT_TIMEOUT}};
    if (c == &sub_assign) {
        opts[4] =
            (struct option){"revision", required_argument, NULL, OPT_REVISION};
        opts[5] = (struct option){"force", no_argument, NULL, OPT_FORCE};
    }
    const char *urls = NULL;
    long rev = -1;
    bool force = false;
    long timeout = TROUPE_ETCD_TIMEOUT_DEFAULT_MS;
    troupe_log_level level = TROUPE_LOG_DEFAULT;
    cli_getopt_reset();
    int ch, rc;
    while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (ch) {
        case OPT_ETCD:
            urls = optarg;
            break;
        case OPT_TIMEOUT:
            if (!cli_num(c, "--timeout", optarg, 1, 600000, &timeout))
                return CLI_USAGE;
            break;
        case OPT_REVISION:
            if (!cli_num(c, "--revision", optarg, 0, LONG_MAX, &rev))
                return CLI_USAGE;
            break;
        case OPT_FORCE:
            force = true;
            break;
        default:
            if ((rc = cli_common_flag(c, ch, argv, &level)) != CLI_CONTINUE)
                return rc;
        }
    }
    bool two = c == &sub_assign;
    if ((rc = cli_operands(c, argc, argv, two ? 2 : 0,
                           two ? "assign wants UNIT and NODE" : "")) !=
        CLI_CONTINUE)
        return rc;
    const char *unit = two ? argv[optind] : NULL;
    long node = 0;
    if (two && !troupe_map_unit_ok(unit))
        return cli_usage(c,
                         "'%s' is not a unit: table:NAME:SHARD, "
                         "queue:NAME:PARTITION or coord:SHARD",
                         unit);
    if (two && !cli_num(c, "NODE", argv[optind + 1], 1, UINT32_MAX - 1, &node))
        return CLI_USAGE;
    if (urls == NULL)
        return cli_usage(c, "--etcd is required");
    troupe_logger lg = {.level = level};
    troupe_etcd_opts eo = {
        .endpoints = urls, .timeout_ms = (uint32_t)timeout, .log = &lg};
    troupe_etcd *etcd = NULL;
    troupe_err e = troupe_etcd_open(&eo, &etcd);
    if (e == TROUPE_EINVAL)
        return cli_usage(c,
                         "--etcd wants http://HOST:PORT URLs, "
                         "comma-separated (at most %d), got '%s'",
                         TROUPE_ETCD_ENDPOINTS_MAX, urls);
    if (e != TROUPE_OK)
        return cli_failed("etcd client", e);
    if (c == &sub_nodes)
        rc = list_nodes(etcd);
    else if (c == &sub_map)
        rc = print_map(etcd);
    else
        rc = assign(etcd, unit, (uint32_t)node, rev, force);
    troupe_etcd_stop_wait(etcd);
    troupe_etcd_destroy(etcd);
    return rc;
}
