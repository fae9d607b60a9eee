/*
 * The troupe command.
 *
 *   troupe version
 *   troupe node --data DIR --listen URL [--peer URL]... [--id N]
 *               [--schedulers N]
 *   troupe ping URL [--count N] [--timeout MS] [--listen URL]
 *   troupe stats --data DIR
 *
 * `node` runs a node until SIGINT or SIGTERM, then shuts down cleanly: it
 * opens the database under DIR, serves a kv actor registered as "kv" (the
 * built-in actors of later versions join it), listens on URL and dials its
 * peers. `ping` measures round trips to a node's own address (no actor
 * needed there). `stats` opens the database under DIR (which must exist;
 * RocksDB's lock refuses it while a node holds it), opens its tables and
 * prints the data-layer counters, one `key value...` line each. Key
 * versions live in memory, so a fresh open shows the catalog and zero
 * records: the command reports this process's view. Bad flags and unreachable
 * URLs print a clear message and exit non-zero (2 for usage, 1 for failures).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "troupe/actor.h"
#include "troupe/commit.h"
#include "troupe/kv.h"
#include "troupe/storage.h"
#include "troupe/table.h"
#include "troupe/transport.h"

#define MAX_PEERS 64

static int
usage(void)
{
    fprintf(stderr,
            "usage:\n"
            "  troupe version\n"
            "  troupe node --data DIR --listen URL [--peer URL]... [--id N]"
            " [--schedulers N]\n"
            "  troupe ping URL [--count N] [--timeout MS] [--listen URL]\n"
            "  troupe stats --data DIR\n");
    return 2;
}

static int
failed(const char *what, troupe_err e)
{
    fprintf(stderr, "troupe: %s: %s (%s)\n", what, troupe_strerror(e),
            troupe_err_name(e));
    return 1;
}

/* Parses a decimal in [lo, hi]; false (with a message) otherwise. */
static bool
parse_num(const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (s == NULL || *s == '\0' || errno || *end || v < lo || v > hi) {
        fprintf(stderr, "troupe: %s wants a number in %ld..%ld, got '%s'\n",
                flag, lo, hi, s ? s : "");
        return false;
    }
    *out = v;
    return true;
}

/* Blocks SIGINT/SIGTERM in this thread and every thread it creates after,
 * so the main thread can wait for them with sigwait. */
static void
block_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, set, NULL);
}

static int
cmd_node(int argc, char **argv)
{
    const char *data = NULL, *listen = NULL;
    const char *peers[MAX_PEERS];
    int npeers = 0;
    long id = 1, scheds = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) {
            fprintf(stderr, "troupe node: %s needs a value\n", a);
            return usage();
        }
        if (strcmp(a, "--data") == 0)
            data = v;
        else if (strcmp(a, "--listen") == 0)
            listen = v;
        else if (strcmp(a, "--peer") == 0) {
            if (npeers == MAX_PEERS) {
                fprintf(stderr, "troupe node: at most %d peers\n", MAX_PEERS);
                return 2;
            }
            peers[npeers++] = v;
        } else if (strcmp(a, "--id") == 0) {
            if (!parse_num("--id", v, 1, UINT32_MAX - 1, &id))
                return 2;
        } else if (strcmp(a, "--schedulers") == 0) {
            if (!parse_num("--schedulers", v, 1, 256, &scheds))
                return 2;
        } else {
            fprintf(stderr, "troupe node: unknown flag %s\n", a);
            return usage();
        }
        i++;
    }
    if (data == NULL || listen == NULL) {
        fprintf(stderr, "troupe node: --data and --listen are required\n");
        return usage();
    }
    sigset_t sigs;
    block_signals(&sigs);

    troupe_db *db = NULL;
    troupe_commit *commit = NULL;
    troupe_runtime *rt = NULL;
    troupe_node *node = NULL;
    troupe_err e = troupe_db_open(data, NULL, &db);
    if (e != TROUPE_OK)
        return failed("open database", e);
    int rc = 0;
    troupe_runtime_opts ro = {.schedulers = (unsigned)scheds,
                              .node_id = (uint32_t)id};
    if ((e = troupe_commit_create(db, NULL, &commit)) != TROUPE_OK ||
        (e = troupe_runtime_create(&rt, &ro)) != TROUPE_OK) {
        rc = failed("start", e);
        goto out;
    }
    if ((e = troupe_node_create(&node, rt, NULL)) != TROUPE_OK) {
        rc = failed("transport", e);
        goto out_rt;
    }
    if ((e = troupe_node_listen(node, listen)) != TROUPE_OK) {
        fprintf(stderr, "troupe node: cannot listen on %s\n", listen);
        rc = failed("listen", e);
        goto out_rt;
    }
    troupe_kv_opts ko = {.db = db, .commit = commit, .cf = "kv"};
    troupe_spawn_opts so = TROUPE_SPAWN_OPTS_INIT;
    so.name = "kv";
    troupe_addr kv;
    if ((e = troupe_kv_spawn(rt, &ko, &so, &kv)) != TROUPE_OK) {
        rc = failed("kv actor", e);
        goto out_rt;
    }
    for (int i = 0; i < npeers; i++) {
        if ((e = troupe_node_connect(node, peers[i])) != TROUPE_OK) {
            fprintf(stderr, "troupe node: bad peer URL %s\n", peers[i]);
            rc = failed("connect", e);
            goto out_rt;
        }
    }
    printf("troupe node %ld: data %s, listening on %s, %d peer(s); "
           "SIGINT or SIGTERM stops it\n",
           id, data, troupe_node_url(node), npeers);
    fflush(stdout);
    int sig = 0;
    sigwait(&sigs, &sig);
    printf("troupe node %ld: %s received, shutting down\n", id,
           sig == SIGINT ? "SIGINT" : "SIGTERM");
    fflush(stdout);
out_rt:
    if (rt != NULL)
        troupe_runtime_shutdown_wait(rt);
    troupe_node_destroy(node);
    troupe_runtime_destroy(rt);
out:
    troupe_commit_destroy(commit);
    e = troupe_db_close(db);
    if (e != TROUPE_OK && rc == 0)
        rc = failed("close database", e);
    if (rc == 0)
        printf("troupe node %ld: stopped cleanly\n", id);
    return rc;
}

/* ---- ping ---- */

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

static int
cmd_ping(int argc, char **argv)
{
    if (argc < 1 || argv[0][0] == '-')
        return usage();
    const char *url = argv[0], *listen = NULL;
    long count = 10, timeout = 2000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--count") == 0) {
            if (!parse_num("--count", v, 1, 10000000, &count))
                return 2;
        } else if (strcmp(a, "--timeout") == 0) {
            if (!parse_num("--timeout", v, 1, 3600000, &timeout))
                return 2;
        } else if (strcmp(a, "--listen") == 0 && v != NULL) {
            listen = v;
        } else {
            fprintf(stderr, "troupe ping: unknown flag %s\n", a);
            return usage();
        }
        i++;
    }
    char own[128];
    if (listen == NULL) {
        /* Replies come back over a link the target dials to us. */
        if (strncmp(url, "ipc://", 6) == 0)
            snprintf(own, sizeof(own), "ipc:///tmp/troupe-ping-%ld.ipc",
                     (long)getpid());
        else if (strncmp(url, "inproc://", 9) == 0) {
            fprintf(stderr, "troupe ping: inproc:// URLs exist only inside "
                            "one process\n");
            return 2;
        } else
            snprintf(own, sizeof(own), "tcp://127.0.0.1:0");
        listen = own;
    }
    troupe_runtime *rt = NULL;
    troupe_node *node = NULL;
    /* A node id unlikely to collide with the cluster's own. */
    troupe_runtime_opts ro = {.schedulers = 1,
                              .workers = 1,
                              .node_id = 0x70000000u | (uint32_t)getpid()};
    troupe_err e = troupe_runtime_create(&rt, &ro);
    if (e != TROUPE_OK)
        return failed("runtime", e);
    int rc = 0;
    uint32_t peer = 0;
    if ((e = troupe_node_create(&node, rt, NULL)) != TROUPE_OK ||
        (e = troupe_node_listen(node, listen)) != TROUPE_OK) {
        rc = failed("transport", e);
        goto out;
    }
    e = troupe_node_connect_wait(node, url, (uint32_t)timeout, &peer);
    if (e != TROUPE_OK) {
        fprintf(stderr, "troupe ping: %s did not answer within %ld ms\n", url,
                timeout);
        rc = failed("connect", e);
        goto out;
    }
    uint64_t *rtt = malloc(sizeof(uint64_t) * (size_t)count);
    if (rtt == NULL) {
        rc = failed("ping", TROUPE_ENOMEM);
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
        rc = failed("ping", e);
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
    troupe_node_destroy(node);
    troupe_runtime_destroy(rt);
    return rc;
}

static void
print_stats(const troupe_tables_stats *s)
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

static int
cmd_stats(int argc, char **argv)
{
    const char *data = NULL;
    for (int i = 0; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) {
            fprintf(stderr, "troupe stats: %s needs a value\n", a);
            return usage();
        }
        if (strcmp(a, "--data") == 0)
            data = v;
        else {
            fprintf(stderr, "troupe stats: unknown flag %s\n", a);
            return usage();
        }
    }
    if (data == NULL) {
        fprintf(stderr, "troupe stats: --data is required\n");
        return usage();
    }
    if (access(data, F_OK) != 0) { /* opening would create it */
        fprintf(stderr, "troupe stats: no database at %s\n", data);
        return 1;
    }
    troupe_db *db = NULL;
    troupe_commit *commit = NULL;
    troupe_runtime *rt = NULL;
    troupe_tables *tables = NULL;
    troupe_tables_stats *st = NULL;
    troupe_err e = troupe_db_open(data, NULL, &db);
    if (e != TROUPE_OK)
        return failed("open database", e);
    int rc = 0;
    troupe_runtime_opts ro = {0};
    if ((e = troupe_commit_create(db, NULL, &commit)) != TROUPE_OK ||
        (e = troupe_runtime_create(&rt, &ro)) != TROUPE_OK) {
        rc = failed("start", e);
        goto out;
    }
    troupe_tables_opts to = {.rt = rt, .db = db, .commit = commit};
    if ((e = troupe_tables_open(&to, &tables)) != TROUPE_OK) {
        rc = failed("open tables", e);
        goto out_rt;
    }
    if ((e = troupe_tables_stats_wait(tables, &st)) != TROUPE_OK)
        rc = failed("stats", e);
    else
        print_stats(st);
    troupe_tables_stats_destroy(st);
    troupe_tables_stop_wait(tables);
    troupe_tables_destroy(tables);
out_rt:
    troupe_runtime_shutdown_wait(rt);
    troupe_runtime_destroy(rt);
out:
    troupe_commit_destroy(commit);
    troupe_db_close(db);
    return rc;
}

int
main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(argv[1], "version") == 0 && argc == 2) {
        printf("troupe %s\n", TROUPE_VERSION);
        return 0;
    }
    if (strcmp(argv[1], "node") == 0)
        return cmd_node(argc - 2, argv + 2);
    if (strcmp(argv[1], "ping") == 0)
        return cmd_ping(argc - 2, argv + 2);
    if (strcmp(argv[1], "stats") == 0)
        return cmd_stats(argc - 2, argv + 2);
    fprintf(stderr, "troupe: unknown command '%s'\n", argv[1]);
    return usage();
}
