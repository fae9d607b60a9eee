/*
 * troupe ping: round trips to a node's own address (no actor needed
 * there), over a link the target dials back to us.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "cli.h"
#include "troupe/runtime.h"

const cli_cmd cli_ping_cmd = {
    .name = "ping",
    .synopsis = "ping URL [--count N] [--timeout MS] [--listen URL] [--id N]\n"
                "              [--peer ID=URL]... [--log-level LEVEL] "
                "[SECURITY]",
    .help =
        "Measures round trips to the node at URL and prints min, median, p99\n"
        "and mean. Against a node with an allow-list it needs an --id and a\n"
        "--listen URL that node lists, and --peer ID=URL for the node.\n"
        "\n"
        "  --count N            round trips, 1..10000000 (default 10)\n"
        "  --timeout MS         for the link and for each round trip,\n"
        "                       1..3600000 ms (default 2000)\n"
        "  --listen URL         where the node dials back (default: an\n"
        "                       ephemeral address of URL's kind)\n"
        "  --id N               this process's node id (default: one\n"
        "                       unlikely to collide)\n"
        "  --peer ID=URL        the pinged node's id and URL, as this\n"
        "                       side's allow-list\n"
        "  --log-level LEVEL    error, warn, info or debug (default warn)\n"
        "  --secret-file FILE   the cluster secret\n"
        "  --tls-cert FILE      this side's PEM certificate\n"
        "  --tls-key FILE       its PEM key\n"
        "  --tls-ca FILE        the cluster's PEM CA\n"
        "  -h, --help           this help\n",
};

enum { OPT_COUNT = OPT_FIRST_OWN, OPT_TIMEOUT, OPT_LISTEN, OPT_ID };

typedef struct ping_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    troupe_err err;
} ping_state;

static void
on_pong(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    ping_state *p = arg;
    pthread_mutex_lock(&p->mu);
    p->done = true;
    p->err = err;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int
cmd_ping(int argc, char **argv)
{
    const cli_cmd *c = &cli_ping_cmd;
    static const struct option opts[] = {
        {"count", required_argument, NULL, OPT_COUNT},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"listen", required_argument, NULL, OPT_LISTEN},
        {"id", required_argument, NULL, OPT_ID},
        CLI_SEC_OPTIONS,
        CLI_COMMON_OPTIONS,
        {NULL, 0, NULL, 0}};
    const char *listen = NULL;
    long count = 10, timeout = 2000, id = 0;
    troupe_log_level level = TROUPE_LOG_DEFAULT;
    static cli_sec sec;
    memset(&sec, 0, sizeof(sec));
    cli_getopt_reset();
    int ch, rc;
    while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        int taken = cli_sec_flag(&sec, c, ch, optarg);
        if (taken < 0)
            return CLI_USAGE;
        if (taken > 0)
            continue;
        switch (ch) {
        case OPT_COUNT:
            if (!cli_num(c, "--count", optarg, 1, 10000000, &count))
                return CLI_USAGE;
            break;
        case OPT_TIMEOUT:
            if (!cli_num(c, "--timeout", optarg, 1, 3600000, &timeout))
                return CLI_USAGE;
            break;
        case OPT_LISTEN:
            if (!cli_url(c, "--listen", optarg, true))
                return CLI_USAGE;
            listen = optarg;
            break;
        case OPT_ID:
            if (!cli_num(c, "--id", optarg, 1, UINT32_MAX - 1, &id))
                return CLI_USAGE;
            break;
        default:
            if ((rc = cli_common_flag(c, ch, argv, &level)) != CLI_CONTINUE)
                return rc;
        }
    }
    if ((rc = cli_operands(c, argc, argv, 1, "which node? give its URL")) !=
        CLI_CONTINUE)
        return rc;
    const char *url = argv[optind];
    if (!cli_url(c, "URL", url, true))
        return CLI_USAGE;
    if (sec.bare)
        return cli_usage(c, "--peer wants ID=URL (the node pinged is the URL "
                            "argument)");
    troupe_node_opts no = {0};
    int bad = cli_sec_opts(&sec, c, &no);
    if (bad != 0)
        return bad;
    char own[128];
    if (listen == NULL) {
        /* Replies come back over a link the target dials to us. */
        if (strncmp(url, "ipc://", 6) == 0)
            snprintf(own, sizeof(own), "ipc:///tmp/troupe-ping-%ld.ipc",
                     (long)getpid());
        else if (strncmp(url, "tls+tcp://", 10) == 0)
            snprintf(own, sizeof(own), "tls+tcp://127.0.0.1:0");
        else
            snprintf(own, sizeof(own), "tcp://127.0.0.1:0");
        listen = own;
    }
    troupe_runtime *rt = NULL;
    troupe_node *node = NULL;
    /* A node id unlikely to collide with the cluster's own. */
    troupe_runtime_opts ro = {.schedulers = 1,
                              .workers = 1,
                              .node_id = id ? (uint32_t)id
                                            : 0x70000000u | (uint32_t)getpid(),
                              .logger = {.level = level}};
    troupe_err e = troupe_runtime_create(&rt, &ro);
    if (e != TROUPE_OK)
        return cli_failed("runtime", e);
    rc = 0;
    uint32_t peer = 0;
    if ((e = troupe_node_create(&node, rt, &no)) != TROUPE_OK ||
        (e = troupe_node_listen(node, listen)) != TROUPE_OK) {
        rc = cli_failed("transport", e);
        goto out;
    }
    e = troupe_node_connect_wait(node, url, (uint32_t)timeout, &peer);
    if (e == TROUPE_EAUTH || e == TROUPE_EFULL) {
        fprintf(stderr,
                "troupe ping: %s refused us (or failed to prove who it is)\n",
                url);
        rc = cli_failed("connect", e);
        goto out;
    }
    if (e == TROUPE_ETIMEDOUT) {
        fprintf(stderr, "troupe ping: %s did not answer within %ld ms\n", url,
                timeout);
        rc = cli_failed("connect", e);
        goto out;
    }
    if (e != TROUPE_OK) {
        /* Not a timeout: say what the transport said, not "no answer". */
        fprintf(stderr, "troupe ping: cannot reach %s\n", url);
        rc = cli_failed("connect", e);
        goto out;
    }
    uint64_t *rtt = malloc(sizeof(uint64_t) * (size_t)count);
    if (rtt == NULL) {
        rc = cli_failed("ping", TROUPE_ENOMEM);
        goto out;
    }
    ping_state ps = {.mu = PTHREAD_MUTEX_INITIALIZER,
                     .cv = PTHREAD_COND_INITIALIZER};
    long ok = 0;
    for (long i = 0; i < count; i++) {
        troupe_msg *m = NULL;
        if ((e = troupe_msg_create(&m, TROUPE_NODE_PING, NULL, 0)) != TROUPE_OK)
            break;
        ps.done = false;
        uint64_t t0 = uv_hrtime();
        e = troupe_runtime_ask(rt, troupe_node_addr(peer), &m,
                               (uint32_t)timeout, on_pong, &ps);
        if (e != TROUPE_OK)
            break;
        pthread_mutex_lock(&ps.mu);
        while (!ps.done)
            pthread_cond_wait(&ps.cv, &ps.mu);
        pthread_mutex_unlock(&ps.mu);
        if ((e = ps.err) != TROUPE_OK)
            break;
        rtt[ok++] = uv_hrtime() - t0;
    }
    if (e != TROUPE_OK) {
        fprintf(stderr, "troupe ping: round trip %ld to node %u failed\n",
                ok + 1, peer);
        rc = cli_failed("ping", e);
    }
    if (ok > 0) {
        qsort(rtt, (size_t)ok, sizeof(*rtt), cmp_u64);
        uint64_t sum = 0;
        for (long i = 0; i < ok; i++)
            sum += rtt[i];
        printf("ping %s (node %u): %ld round trips, min %.1f us, median %.1f "
               "us, p99 %.1f us, mean %.1f us\n",
               url, peer, ok, rtt[0] / 1e3, rtt[ok / 2] / 1e3,
               rtt[(ok * 99) / 100] / 1e3, (double)sum / (double)ok / 1e3);
    }
    free(rtt);
out:
    troupe_runtime_shutdown_wait(rt);
    if (node != NULL && !cli_node_stop(node)) {
        fflush(NULL);
        _exit(rc);
    }
    troupe_node_destroy(node);
    troupe_runtime_destroy(rt);
    return rc;
}
