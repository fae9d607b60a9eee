/*
 * troupe node: runs a node until SIGINT or SIGTERM, then shuts down
 * cleanly. It opens the database, serves a kv actor registered as "kv",
 * opens the database's tables and its coordinator of global transactions
 * (troupe/coordinator.h: the ones left unfinished in the database are
 * driven again from here), listens and dials its peers (docs/security.md
 * for the security flags). With --admin it also opens the queues and
 * serves the admin endpoint (admin.h) over them. With --dtm it opens the
 * http branches' target (troupe/httpcall.h, "http") and serves DTM's HTTP
 * API (dtm_api.h) over the coordinator. A TTL scanner
 * (troupe/ttl.h) expires what is open: key versions and expired rows of
 * the tables, the queues' completed history, the coordinator's ended
 * transactions past their retention (7 days) with their barrier rows.
 * Teardown runs in the reverse order: DTM API, endpoint, TTL scanner,
 * queues, coordinator, http target, tables, catalog, runtime, node,
 * pipeline, database (the http target after the coordinator, which
 * dispatches to it).
 *
 * With etcd endpoints (--etcd, or etcd in --config's file) the node
 * registers itself in etcd under a lease it keeps alive (troupe/member.h:
 * /troupe/nodes/<id>), after everything else is open, and revokes it
 * first when it stops; a node killed outright disappears from the listing
 * when its lease expires.
 *
 * Without --dtm the node registers no dispatch target of its own, so a
 * branch of a reloaded transaction finds none and counts as UNKNOWN,
 * retried after its backoff (docs/coordinator.md, "Operating it"): it
 * waits for an operator (troupe gtx) or for a process that serves its
 * targets.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "admin.h"
#include "cli.h"
#include "dtm_api.h"
#include "node_config.h"
#include "troupe/actor.h"
#include "troupe/catalog.h"
#include "troupe/commit.h"
#include "troupe/coordinator.h"
#include "troupe/etcd.h"
#include "troupe/httpcall.h"
#include "troupe/kv.h"
#include "troupe/member.h"
#include "troupe/queue.h"
#include "troupe/storage.h"
#include "troupe/table.h"
#include "troupe/ttl.h"

const cli_cmd cli_node_cmd = {
    .name = "node",
    .synopsis = "node [--config FILE] --data DIR --listen URL [--peer "
                "[ID=]URL]...\n"
                "              [--id N] [--etcd URLS [--lease-ttl S]]\n"
                "              [--schedulers N] [--admin HOST:PORT "
                "[--admin-token FILE]]\n"
                "              [--dtm HOST:PORT [--dtm-public]] "
                "[--log-level LEVEL] [SECURITY]",
    .help =
        "Runs a node until SIGINT or SIGTERM, then shuts down cleanly: opens\n"
        "the database under DIR (creating it), serves a kv actor registered\n"
        "as \"kv\", opens the tables and the coordinator of global\n"
        "transactions (the unfinished ones are driven again), listens on\n"
        "URL and dials its peers. With etcd endpoints it registers in\n"
        "etcd as /troupe/nodes/<id> under a lease it keeps alive.\n"
        "\n"
        "  --config FILE        read id, listen, data, etcd and lease_ttl\n"
        "                       from FILE's `key = value` lines; flags\n"
        "                       given here override them (docs/cluster.md)\n"
        "  --data DIR           the database directory (required)\n"
        "  --listen URL         where to listen: tcp://HOST:PORT (port 0:\n"
        "                       any), tls+tcp://HOST:PORT, ipc://PATH\n"
        "                       (required)\n"
        "  --peer [ID=]URL      a peer to dial, repeatable; with ID= the\n"
        "                       node is also on the allow-list (then only\n"
        "                       listed nodes are accepted, and every --peer\n"
        "                       needs its ID)\n"
        "  --id N               this node's id, 1..4294967294 (default 1)\n"
        "  --etcd URLS          etcd's client URLs, comma-separated\n"
        "                       (http://HOST:PORT): register there\n"
        "  --lease-ttl S        the registration's lease, 2..3600 seconds\n"
        "                       (default 10), renewed every S/3\n"
        "  --schedulers N       scheduler threads, 1..256 (default: one per\n"
        "                       core)\n"
        "  --admin HOST:PORT    serve the admin endpoint (HTTP: JSON and\n"
        "                       /metrics) there, over this node, its\n"
        "                       coordinator and the database's tables and\n"
        "                       queues (which it then opens); HOST must be\n"
        "                       loopback (127.0.0.1, ::1, localhost)\n"
        "                       unless --admin-token is given; PORT 0: any\n"
        "                       free one\n"
        "  --admin-token FILE   the endpoint's bearer token (16..4096 bytes;\n"
        "                       one trailing newline is not part of it):\n"
        "                       every request must send Authorization:\n"
        "                       Bearer <token>\n"
        "  --dtm HOST:PORT      serve DTM's HTTP API (/api/dtmsvr/...: saga,\n"
        "                       msg and tcc) there, so that DTM's client\n"
        "                       SDKs use this node as their coordinator, and\n"
        "                       call http:// branches (target \"http\");\n"
        "                       HOST must be loopback unless --dtm-public;\n"
        "                       PORT 0: any free one\n"
        "  --dtm-public         allow a --dtm HOST that is not loopback:\n"
        "                       DTM's protocol has no authentication, so\n"
        "                       anyone who reaches it can start and abort\n"
        "                       transactions\n"
        "  --log-level LEVEL    error, warn, info or debug: the least severe\n"
        "                       library log records printed (default warn)\n"
        "  --secret-file FILE   the cluster secret (at least 16 bytes; one\n"
        "                       trailing newline is not part of it), proven\n"
        "                       by every peer in its handshake\n"
        "  --tls-cert FILE      this node's PEM certificate (must name\n"
        "                       troupe-node-<id>); with --tls-key and\n"
        "                       --tls-ca it enables tls+tcp:// and makes\n"
        "                       every peer prove its id\n"
        "  --tls-key FILE       its PEM key\n"
        "  --tls-ca FILE        the cluster's PEM CA\n"
        "  -h, --help           this help\n",
};

enum {
    OPT_DATA = OPT_FIRST_OWN,
    OPT_LISTEN,
    OPT_ID,
    OPT_SCHEDULERS,
    OPT_ADMIN,
    OPT_ADMIN_TOKEN,
    OPT_DTM,
    OPT_DTM_PUBLIC,
    OPT_CONFIG,
    OPT_ETCD,
    OPT_LEASE_TTL
};

/* The config file's values where no flag gave one (flags override). */
static int
apply_config(const cli_cmd *c, const char *path, const char **data,
             const char **listen, long *id, bool id_set, const char **etcd,
             long *ttl, bool ttl_set)
{
    static node_config nc;
    char why[600];
    if (!node_config_read(path, &nc, why, sizeof(why)))
        return cli_usage(c, "%s", why);
    if (*data == NULL && nc.data[0])
        *data = nc.data;
    if (*listen == NULL && nc.listen[0]) {
        if (!cli_url(c, "listen (in --config)", nc.listen, false))
            return CLI_USAGE;
        *listen = nc.listen;
    }
    if (!id_set && nc.id[0] &&
        !cli_num(c, "id (in --config)", nc.id, 1, UINT32_MAX - 1, id))
        return CLI_USAGE;
    if (*etcd == NULL && nc.etcd[0])
        *etcd = nc.etcd;
    if (!ttl_set && nc.lease_ttl[0] &&
        !cli_num(c, "lease_ttl (in --config)", nc.lease_ttl,
                 TROUPE_MEMBER_TTL_MIN, TROUPE_MEMBER_TTL_MAX, ttl))
        return CLI_USAGE;
    return CLI_CONTINUE;
}

/* The objects opened on the database beside the kv actor: the catalog,
 * the tables and the coordinator always, the queues and the endpoint with
 * --admin. Each NULL until opened. */
typedef struct node_objs {
    troupe_catalog *cat;
    troupe_tables *tables;
    troupe_coord *coord;
    troupe_queues *queues;
    troupe_ttl *ttl; /* expiry: versions, rows, queue history, ended gtx */
    admin *ep;
    troupe_httpcall *http; /* with --dtm: the http branches' target */
    dtm_api *dtm;
} node_objs;

/* The reverse of objs_open: the DTM API and the endpoint first (their
 * routes call into the rest), the TTL scanner before what it borrows, the
 * coordinator before the tables it borrows and the http target it
 * dispatches to. */
static void
objs_close(node_objs *a)
{
    dtm_api_destroy(a->dtm);
    admin_destroy(a->ep);
    if (a->ttl != NULL) {
        troupe_ttl_stop_wait(a->ttl);
        troupe_ttl_destroy(a->ttl);
    }
    if (a->queues != NULL)
        troupe_queues_stop_wait(a->queues);
    troupe_queues_destroy(a->queues);
    if (a->coord != NULL) {
        troupe_coord_stop_wait(a->coord);
        troupe_coord_destroy(a->coord);
    }
    if (a->http != NULL) {
        troupe_httpcall_stop_wait(a->http);
        troupe_httpcall_destroy(a->http);
    }
    if (a->tables != NULL) {
        troupe_tables_stop_wait(a->tables);
        troupe_tables_destroy(a->tables);
    }
    if (a->cat != NULL) {
        troupe_catalog_stop_wait(a->cat);
        troupe_catalog_destroy(a->cat);
    }
}

/* The TTL scanner over what is open (troupe/ttl.h): the tables' versions
 * and expired rows, the queues' completed history, the coordinator's
 * ended transactions past their retention. */
static int
ttl_open(node_objs *a, troupe_runtime *rt)
{
    troupe_ttl_opts o = {
        .rt = rt, .tables = a->tables, .queues = a->queues, .coord = a->coord};
    troupe_err e = troupe_ttl_create(&o, &a->ttl);
    return e == TROUPE_OK ? 0 : cli_failed("start the TTL scanner", e);
}

/* With --dtm: the DTM API over the coordinator (its http target is
 * opened before the coordinator, so that a reloaded http branch finds
 * it). */
static int
dtm_open(node_objs *a, troupe_runtime *rt, const char *dtm_addr,
         bool dtm_public)
{
    troupe_err e = dtm_api_create(rt, a->coord, dtm_addr, dtm_public, &a->dtm);
    if (e != TROUPE_OK) {
        fprintf(stderr, "troupe node: cannot serve the DTM API on %s\n",
                dtm_addr);
        return cli_failed("DTM API", e);
    }
    return 0;
}

/* Opens the tables and the coordinator, and with addr the queues and the
 * endpoint, with dtm_addr the http target and the DTM API, then the TTL
 * scanner: 0, or CLI_FAIL with the message printed (what was opened stays
 * in *a for objs_close). */
static int
objs_open(node_objs *a, const admin_ctx *base, const char *addr,
          const char *token, size_t token_len, const char *dtm_addr,
          bool dtm_public)
{
    troupe_catalog_opts co = {.rt = base->rt, .db = base->db};
    troupe_err e = troupe_catalog_open(&co, &a->cat);
    if (e != TROUPE_OK)
        return cli_failed("open catalog", e);
    troupe_tables_opts to = {.catalog = a->cat, .commit = base->commit};
    if ((e = troupe_tables_open(&to, &a->tables)) != TROUPE_OK)
        return cli_failed("open tables", e);
    if (dtm_addr != NULL &&
        (e = troupe_httpcall_open(base->rt, NULL, &a->http)) != TROUPE_OK)
        return cli_failed("open the http branches' target", e);
    troupe_coord_opts go = {.rt = base->rt, .tables = a->tables};
    if ((e = troupe_coord_open_wait(&go, &a->coord)) != TROUPE_OK)
        return cli_failed("open coordinator", e);
    int rc;
    if (dtm_addr != NULL &&
        (rc = dtm_open(a, base->rt, dtm_addr, dtm_public)) != 0)
        return rc;
    if (addr == NULL)
        return ttl_open(a, base->rt);
    troupe_queues_opts qo = {.catalog = a->cat, .commit = base->commit};
    if ((e = troupe_queues_open(&qo, &a->queues)) != TROUPE_OK)
        return cli_failed("open queues", e);
    admin_ctx ctx = *base;
    ctx.tables = a->tables;
    ctx.queues = a->queues;
    ctx.coord = a->coord;
    e = admin_create(&ctx, addr, token, token_len, &a->ep);
    if (e == TROUPE_EAUTH) {
        fprintf(stderr,
                "troupe node: --admin %s is not loopback: give "
                "--admin-token\n",
                addr);
        return CLI_FAIL;
    }
    if (e != TROUPE_OK) {
        fprintf(stderr, "troupe node: cannot serve the admin endpoint on %s\n",
                addr);
        return cli_failed("admin endpoint", e);
    }
    return ttl_open(a, base->rt);
}

int
cmd_node(int argc, char **argv)
{
    const cli_cmd *c = &cli_node_cmd;
    static const struct option opts[] = {
        {"data", required_argument, NULL, OPT_DATA},
        {"listen", required_argument, NULL, OPT_LISTEN},
        {"id", required_argument, NULL, OPT_ID},
        {"schedulers", required_argument, NULL, OPT_SCHEDULERS},
        {"admin", required_argument, NULL, OPT_ADMIN},
        {"admin-token", required_argument, NULL, OPT_ADMIN_TOKEN},
        {"dtm", required_argument, NULL, OPT_DTM},
        {"dtm-public", no_argument, NULL, OPT_DTM_PUBLIC},
        {"config", required_argument, NULL, OPT_CONFIG},
        {"etcd", required_argument, NULL, OPT_ETCD},
        {"lease-ttl", required_argument, NULL, OPT_LEASE_TTL},
        CLI_SEC_OPTIONS,
        CLI_COMMON_OPTIONS,
        {NULL, 0, NULL, 0}};
    const char *data = NULL, *listen = NULL, *admin_addr = NULL,
               *token_file = NULL, *dtm_addr = NULL, *config = NULL,
               *etcd_urls = NULL;
    bool id_set = false, ttl_set = false;
    long ttl = TROUPE_MEMBER_TTL_DEFAULT;
    bool dtm_public = false;
    static char token[ADMIN_TOKEN_MAX + 1];
    size_t token_len = 0;
    static cli_sec sec; /* 8 KiB of secret and peers: off the stack */
    memset(&sec, 0, sizeof(sec));
    long id = 1, scheds = 0;
    troupe_log_level level = TROUPE_LOG_DEFAULT;
    cli_getopt_reset();
    int ch, rc;
    bool wedged = false; /* the transport's stop did not end in time */
    while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        int taken = cli_sec_flag(&sec, c, ch, optarg);
        if (taken < 0)
            return CLI_USAGE;
        if (taken > 0)
            continue;
        switch (ch) {
        case OPT_DATA:
            data = optarg;
            break;
        case OPT_LISTEN:
            if (!cli_url(c, "--listen", optarg, false))
                return CLI_USAGE;
            listen = optarg;
            break;
        case OPT_ID:
            if (!cli_num(c, "--id", optarg, 1, UINT32_MAX - 1, &id))
                return CLI_USAGE;
            id_set = true;
            break;
        case OPT_CONFIG:
            config = optarg;
            break;
        case OPT_ETCD:
            etcd_urls = optarg;
            break;
        case OPT_LEASE_TTL:
            if (!cli_num(c, "--lease-ttl", optarg, TROUPE_MEMBER_TTL_MIN,
                         TROUPE_MEMBER_TTL_MAX, &ttl))
                return CLI_USAGE;
            ttl_set = true;
            break;
        case OPT_SCHEDULERS:
            if (!cli_num(c, "--schedulers", optarg, 1, 256, &scheds))
                return CLI_USAGE;
            break;
        case OPT_ADMIN:
            admin_addr = optarg;
            break;
        case OPT_ADMIN_TOKEN:
            token_file = optarg;
            break;
        case OPT_DTM:
            dtm_addr = optarg;
            break;
        case OPT_DTM_PUBLIC:
            dtm_public = true;
            break;
        default:
            if ((rc = cli_common_flag(c, ch, argv, &level)) != CLI_CONTINUE)
                return rc;
        }
    }
    if ((rc = cli_operands(c, argc, argv, 0, "")) != CLI_CONTINUE)
        return rc;
    if (config != NULL &&
        (rc = apply_config(c, config, &data, &listen, &id, id_set, &etcd_urls,
                           &ttl, ttl_set)) != CLI_CONTINUE)
        return rc;
    if (data == NULL || listen == NULL)
        return cli_usage(c, "--data and --listen are required (as flags or "
                            "in --config's file)");
    if (ttl_set && etcd_urls == NULL)
        return cli_usage(c, "--lease-ttl goes with --etcd");
    if (token_file != NULL && admin_addr == NULL)
        return cli_usage(c, "--admin-token goes with --admin");
    if (dtm_public && dtm_addr == NULL)
        return cli_usage(c, "--dtm-public goes with --dtm");
    if (dtm_addr != NULL) {
        char host[256], url[300];
        if (!admin_parse_addr(dtm_addr, host, sizeof(host), url, sizeof(url)))
            return cli_usage(c, "--dtm wants HOST:PORT");
        if (!dtm_public && !admin_host_is_loopback(host)) {
            fprintf(stderr,
                    "troupe node: --dtm %s is not loopback, and DTM's "
                    "protocol has no authentication (anyone who reaches it "
                    "can start and abort transactions): give --dtm-public "
                    "to serve it there anyway\n",
                    dtm_addr);
            return CLI_USAGE;
        }
        if (admin_addr != NULL && strcmp(admin_addr, dtm_addr) == 0)
            return cli_usage(c, "--dtm and --admin need two addresses");
    }
    if (token_file != NULL &&
        !cli_read_secret(c, "--admin-token", token_file, token, ADMIN_TOKEN_MAX,
                         &token_len))
        return CLI_USAGE;
    troupe_node_opts no = {0};
    int bad = cli_sec_opts(&sec, c, &no);
    if (bad != 0)
        return bad;

    /* the client is opened first (it sends nothing): a bad URL is a
     * usage error before anything is opened */
    troupe_etcd *etcd = NULL;
    troupe_member *member = NULL;
    if (etcd_urls != NULL) {
        /* static: the client borrows it past this block */
        static troupe_logger elg;
        elg.level = level;
        troupe_etcd_opts eo = {.endpoints = etcd_urls, .log = &elg};
        troupe_err ee = troupe_etcd_open(&eo, &etcd);
        if (ee == TROUPE_EINVAL)
            return cli_usage(c,
                             "--etcd wants http://HOST:PORT URLs, "
                             "comma-separated (at most %d), got '%s'",
                             TROUPE_ETCD_ENDPOINTS_MAX, etcd_urls);
        if (ee != TROUPE_OK)
            return cli_failed("etcd client", ee);
    }

    /* SIGINT/SIGTERM blocked in this thread and every thread made after,
     * so that this one waits for them with sigwait. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    troupe_logger lg = {.level = level};
    troupe_db *db = NULL;
    troupe_commit *commit = NULL;
    troupe_runtime *rt = NULL;
    troupe_node *node = NULL;
    troupe_db_opts dbo;
    troupe_db_opts_init(&dbo);
    dbo.logger = lg;
    troupe_err e = troupe_db_open(data, &dbo, &db);
    if (e != TROUPE_OK) {
        troupe_etcd_destroy(etcd);
        return cli_failed("open database", e);
    }
    rc = 0;
    troupe_runtime_opts ro = {
        .schedulers = (unsigned)scheds, .node_id = (uint32_t)id, .logger = lg};
    if ((e = troupe_commit_create(db, NULL, &commit)) != TROUPE_OK ||
        (e = troupe_runtime_create(&rt, &ro)) != TROUPE_OK) {
        rc = cli_failed("start", e);
        goto out;
    }
    if ((e = troupe_node_create(&node, rt, &no)) != TROUPE_OK) {
        rc = cli_failed("transport", e);
        goto out_rt;
    }
    if ((e = troupe_node_listen(node, listen)) != TROUPE_OK) {
        fprintf(stderr, "troupe node: cannot listen on %s\n", listen);
        rc = cli_failed("listen", e);
        goto out_rt;
    }
    troupe_kv_opts ko = {.db = db, .commit = commit, .cf = "kv"};
    troupe_spawn_opts so = TROUPE_SPAWN_OPTS_INIT;
    so.name = "kv";
    troupe_addr kv;
    if ((e = troupe_kv_spawn(rt, &ko, &so, &kv)) != TROUPE_OK) {
        rc = cli_failed("kv actor", e);
        goto out_rt;
    }
    node_objs objs = {0};
    admin_ctx ctx = {
        .rt = rt, .db = db, .commit = commit, .node = node, .kv = kv};
    if ((rc = objs_open(&objs, &ctx, admin_addr, token_len ? token : NULL,
                        token_len, dtm_addr, dtm_public)) != 0)
        goto out_objs;
    for (uint32_t i = 0; i < sec.n_dial; i++) {
        if ((e = troupe_node_connect(node, sec.dial[i])) != TROUPE_OK) {
            fprintf(stderr, "troupe node: cannot dial peer %s\n", sec.dial[i]);
            rc = cli_failed("connect", e);
            goto out_objs;
        }
    }
    if (etcd != NULL) {
        e = troupe_member_start(etcd, (uint32_t)id, troupe_node_url(node),
                                (uint32_t)ttl, &member);
        if (e == TROUPE_EEXIST)
            fprintf(stderr,
                    "troupe node: node %ld is registered in etcd under a "
                    "live lease (another node with this id, or this one's "
                    "last run until its lease of at most %ld s expires)\n",
                    id, ttl);
        if (e != TROUPE_OK) {
            rc = cli_failed("register in etcd", e);
            goto out_objs;
        }
    }
    printf("troupe node %ld: data %s, listening on %s, %u peer(s)%s; "
           "SIGINT or SIGTERM stops it\n",
           id, data, troupe_node_url(node), sec.n_dial,
           sec.n_peers ? " (allow-list)" : "");
    if (objs.ep != NULL)
        printf("troupe node %ld: admin endpoint on http://%.*s:%d/\n", id,
               (int)(strrchr(admin_addr, ':') - admin_addr), admin_addr,
               admin_port(objs.ep));
    if (objs.dtm != NULL)
        printf("troupe node %ld: DTM API on http://%.*s:%d/api/dtmsvr\n", id,
               (int)(strrchr(dtm_addr, ':') - dtm_addr), dtm_addr,
               dtm_api_port(objs.dtm));
    if (member != NULL)
        printf("troupe node %ld: registered in etcd as " TROUPE_MEMBER_PREFIX
               "%ld (lease %lld, ttl %ld s)\n",
               id, id, (long long)troupe_member_lease(member), ttl);
    fflush(stdout);
    int sig = 0;
    sigwait(&sigs, &sig);
    printf("troupe node %ld: %s received, shutting down\n", id,
           sig == SIGINT ? "SIGINT" : "SIGTERM");
    fflush(stdout);
out_objs:
    /* out of the listing first: nothing should route here while the rest
     * closes */
    troupe_member_stop(member);
    objs_close(&objs);
out_rt:
    if (rt != NULL)
        troupe_runtime_shutdown_wait(rt);
    wedged = node != NULL && !cli_node_stop(node);
    if (!wedged) {
        troupe_node_destroy(node);
        troupe_runtime_destroy(rt);
    }
out:
    if (etcd != NULL) {
        troupe_etcd_stop_wait(etcd);
        troupe_etcd_destroy(etcd);
    }
    troupe_commit_destroy(commit);
    e = troupe_db_close(db);
    if (e != TROUPE_OK && rc == 0)
        rc = cli_failed("close database", e);
    if (rc == 0)
        printf("troupe node %ld: stopped cleanly%s\n", id,
               wedged ? " (but for the transport's teardown)" : "");
    if (wedged) { /* nng's threads still hold the node: leave at once */
        fflush(NULL);
        _exit(rc);
    }
    return rc;
}
