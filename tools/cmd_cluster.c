/*
 * troupe cluster: what etcd holds for a cluster (docs/cluster.md).
 *
 *   troupe cluster nodes --etcd URLS   the registered nodes, by id
 *
 * It talks to etcd only (troupe/etcd.h), never to a node.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "troupe/etcd.h"
#include "troupe/member.h"

const cli_cmd cli_cluster_cmd = {
    .name = "cluster",
    .synopsis = "cluster nodes --etcd URLS [--timeout MS]",
    .help = "What etcd holds for a cluster of troupe nodes.\n"
            "\n"
            "Subcommands:\n"
            "  nodes       the nodes registered now (each under a lease it\n"
            "              keeps alive: a node that died is gone once its\n"
            "              lease expired), one line each in id order: id,\n"
            "              listen URL, lease\n"
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

static const cli_cmd *
find_sub(const char *name)
{
    return strcmp(name, "nodes") == 0 ? &sub_nodes : NULL;
}

enum { OPT_ETCD = OPT_FIRST_OWN, OPT_TIMEOUT };

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

int
cmd_cluster(int argc, char **argv)
{
    const cli_cmd *top = &cli_cluster_cmd, *c = NULL;
    int picked = cli_sub_pick(top, argc, argv, "nodes", find_sub, &c);
    if (picked >= 0)
        return picked;
    static const struct option opts[] = {
        {"etcd", required_argument, NULL, OPT_ETCD},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        CLI_COMMON_OPTIONS,
        {NULL, 0, NULL, 0}};
    const char *urls = NULL;
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
        default:
            if ((rc = cli_common_flag(c, ch, argv, &level)) != CLI_CONTINUE)
                return rc;
        }
    }
    if ((rc = cli_operands(c, argc, argv, 0, "")) != CLI_CONTINUE)
        return rc;
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
    rc = list_nodes(etcd);
    troupe_etcd_stop_wait(etcd);
    troupe_etcd_destroy(etcd);
    return rc;
}
