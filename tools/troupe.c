/*
 * The troupe command.
 *
 *   troupe version
 *   troupe node --data DIR --listen URL [--peer [ID=]URL]... [--id N]
 *               [--schedulers N] [SECURITY]
 *   troupe ping URL [--count N] [--timeout MS] [--listen URL] [--id N]
 *               [--peer ID=URL]... [SECURITY]
 *   SECURITY: [--secret-file FILE] [--tls-cert FILE --tls-key FILE
 *              --tls-ca FILE]
 *   troupe stats --data DIR
 *   troupe queue list --data DIR
 *   troupe queue stats --data DIR --queue NAME
 *   troupe queue pending|completed --data DIR --queue NAME [--limit N]
 *                                  [--after CURSOR-HEX]
 *   troupe queue show --data DIR --queue NAME (--id ID | --id-hex HEX)
 *
 * `node` runs a node until SIGINT or SIGTERM, then shuts down cleanly: it
 * opens the database under DIR, serves a kv actor registered as "kv" (the
 * built-in actors of later versions join it), listens on URL and dials its
 * peers. A --peer ID=URL puts that node on the allow-list (then only the
 * listed nodes are accepted, and only their URLs dialed) and dials it; a
 * bare --peer URL only dials (no allow-list may be given then). The
 * SECURITY flags (docs/security.md): --secret-file names a file holding
 * the cluster secret (at least 16 bytes; one trailing newline is not part
 * of it), proven by every peer in its handshake; --tls-cert, --tls-key and
 * --tls-ca name PEM files (this node's certificate, which must name
 * "troupe-node-<id>", its key, and the cluster's CA), enable tls+tcp://
 * URLs and make every peer prove its id with its certificate. `ping`
 * measures round trips to a node's own address (no actor needed there);
 * it takes the same SECURITY flags, and against a node with an allow-list
 * it needs an --id and a --listen URL that node lists (and, as its own
 * allow-list, --peer ID=URL for the node). `stats` opens the database under DIR
 * (which must exist; RocksDB's lock refuses it while a node holds it), opens
 * its tables and prints the data-layer counters, one `key value...` line each.
 * Key versions live in memory, so a fresh open shows the catalog and zero
 * records: the command reports this process's view. `queue` opens the
 * queues of the database under DIR (which must exist, and no node may
 * hold it) and inspects them through troupe/queue.h: the queues, counts
 * per state and partition with the oldest due time and its lag, pages of
 * pending or completed invocations with the cursor of the next page, and
 * every stored invocation of one event id. Opening the queues reserves a
 * block of enqueue orders (one synced write, docs/queue.md) and creates
 * the empty `queues` family in a database that has none: nothing else is
 * written. Pause and resume are not commands: a pause lives in the memory
 * of the process that paused (queue.h), so a command could not make one
 * outlast itself. Bad flags and unreachable
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
#include "troupe/alloc.h"
#include "troupe/commit.h"
#include "troupe/kv.h"
#include "troupe/queue.h"
#include "troupe/storage.h"
#include "troupe/table.h"
#include "troupe/transport.h"
#include "troupe/version.h"

#define MAX_PEERS 64

static int
usage(void)
{
    fprintf(stderr,
            "usage:\n"
            "  troupe version\n"
            "  troupe node --data DIR --listen URL [--peer [ID=]URL]..."
            " [--id N] [--schedulers N] [SECURITY]\n"
            "  troupe ping URL [--count N] [--timeout MS] [--listen URL]"
            " [--id N] [--peer ID=URL]... [SECURITY]\n"
            "    SECURITY: [--secret-file FILE] [--tls-cert FILE --tls-key"
            " FILE --tls-ca FILE]\n"
            "  troupe stats --data DIR\n"
            "  troupe queue list --data DIR\n"
            "  troupe queue stats --data DIR --queue NAME\n"
            "  troupe queue pending|completed --data DIR --queue NAME"
            " [--limit N] [--after CURSOR-HEX]\n"
            "  troupe queue show --data DIR --queue NAME"
            " (--id ID | --id-hex HEX)\n");
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

/* ---- security flags, shared by node and ping ---- */

#define SECRET_MAX 4096

typedef struct sec_flags {
    const char *secret_file;
    const char *cert, *key, *ca;
    troupe_node_peer peers[MAX_PEERS]; /* ID=URL entries */
    uint32_t n_peers;
    const char *dial[MAX_PEERS]; /* every --peer's URL, in order */
    uint32_t n_dial;
    bool bare; /* a --peer without ID= */
    char secret[SECRET_MAX + 1];
    size_t secret_len;
} sec_flags;

/*
 * Takes flag a with value v if it is a security flag: 1 taken, 0 not
 * one, -1 bad (message printed). `who` names the command.
 */
static int
sec_flag(sec_flags *f, const char *who, const char *a, const char *v)
{
    if (strcmp(a, "--secret-file") == 0)
        f->secret_file = v;
    else if (strcmp(a, "--tls-cert") == 0)
        f->cert = v;
    else if (strcmp(a, "--tls-key") == 0)
        f->key = v;
    else if (strcmp(a, "--tls-ca") == 0)
        f->ca = v;
    else if (strcmp(a, "--peer") == 0) {
        if (f->n_dial == MAX_PEERS) {
            fprintf(stderr, "troupe %s: at most %d peers\n", who, MAX_PEERS);
            return -1;
        }
        const char *eq = strchr(v, '=');
        const char *sep = strstr(v, "://");
        if (eq != NULL && (sep == NULL || eq < sep)) {
            char id[16];
            size_t n = (size_t)(eq - v);
            long num;
            if (n == 0 || n >= sizeof(id)) {
                fprintf(stderr,
                        "troupe %s: --peer wants ID=URL or URL, got "
                        "'%s'\n",
                        who, v);
                return -1;
            }
            memcpy(id, v, n);
            id[n] = '\0';
            if (!parse_num("--peer ID", id, 1, UINT32_MAX - 1, &num))
                return -1;
            if (eq[1] == '\0') {
                fprintf(stderr, "troupe %s: --peer %s= needs a URL\n", who, id);
                return -1;
            }
            f->peers[f->n_peers++] = (troupe_node_peer){(uint32_t)num, eq + 1};
            f->dial[f->n_dial++] = eq + 1;
        } else {
            f->bare = true;
            f->dial[f->n_dial++] = v;
        }
    } else
        return 0;
    return 1;
}

/* Reads the secret file (one trailing newline dropped); false with a
 * message when it cannot be read or is too short or too long. */
static bool
read_secret(sec_flags *f, const char *who)
{
    FILE *fp = fopen(f->secret_file, "rb");
    if (fp == NULL) {
        fprintf(stderr, "troupe %s: cannot read --secret-file %s: %s\n", who,
                f->secret_file, strerror(errno));
        return false;
    }
    size_t n = fread(f->secret, 1, sizeof(f->secret), fp);
    fclose(fp);
    if (n > SECRET_MAX) {
        fprintf(stderr, "troupe %s: --secret-file %s is over %d bytes\n", who,
                f->secret_file, SECRET_MAX);
        return false;
    }
    if (n > 0 && f->secret[n - 1] == '\n')
        n--;
    if (n > 0 && f->secret[n - 1] == '\r')
        n--;
    if (n < 16) {
        fprintf(stderr,
                "troupe %s: the secret in %s is %zu bytes; at least "
                "16 are needed\n",
                who, f->secret_file, n);
        return false;
    }
    f->secret_len = n;
    return true;
}

/*
 * Checks the flags together and fills the node options: 0, or 2 (usage,
 * message printed).
 */
static int
sec_opts(sec_flags *f, const char *who, troupe_node_opts *o)
{
    int tls = (f->cert != NULL) + (f->key != NULL) + (f->ca != NULL);
    if (tls != 0 && tls != 3) {
        fprintf(stderr,
                "troupe %s: --tls-cert, --tls-key and --tls-ca go "
                "together\n",
                who);
        return 2;
    }
    if (f->bare && f->n_peers > 0) {
        fprintf(stderr,
                "troupe %s: with an allow-list (--peer ID=URL) every "
                "--peer needs its ID\n",
                who);
        return 2;
    }
    if (f->secret_file != NULL && !read_secret(f, who))
        return 2;
    if (f->secret_len > 0) {
        o->secret = f->secret;
        o->secret_len = f->secret_len;
    }
    o->tls_cert = f->cert;
    o->tls_key = f->key;
    o->tls_ca = f->ca;
    if (f->n_peers > 0) {
        o->peers = f->peers;
        o->n_peers = f->n_peers;
    }
    return 0;
}

static int
cmd_node(int argc, char **argv)
{
    const char *data = NULL, *listen = NULL;
    sec_flags sec;
    memset(&sec, 0, sizeof(sec));
    long id = 1, scheds = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) {
            fprintf(stderr, "troupe node: %s needs a value\n", a);
            return usage();
        }
        int taken = sec_flag(&sec, "node", a, v);
        if (taken < 0)
            return 2;
        if (taken > 0) {
            i++;
            continue;
        }
        if (strcmp(a, "--data") == 0)
            data = v;
        else if (strcmp(a, "--listen") == 0)
            listen = v;
        else if (strcmp(a, "--id") == 0) {
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
    troupe_node_opts no = {0};
    int bad = sec_opts(&sec, "node", &no);
    if (bad != 0)
        return bad;
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
    if ((e = troupe_node_create(&node, rt, &no)) != TROUPE_OK) {
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
    for (uint32_t i = 0; i < sec.n_dial; i++) {
        if ((e = troupe_node_connect(node, sec.dial[i])) != TROUPE_OK) {
            fprintf(stderr, "troupe node: bad peer URL %s\n", sec.dial[i]);
            rc = failed("connect", e);
            goto out_rt;
        }
    }
    printf("troupe node %ld: data %s, listening on %s, %u peer(s)%s; "
           "SIGINT or SIGTERM stops it\n",
           id, data, troupe_node_url(node), sec.n_dial,
           sec.n_peers ? " (allow-list)" : "");
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
    long count = 10, timeout = 2000, id = 0;
    sec_flags sec;
    memset(&sec, 0, sizeof(sec));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int taken = v != NULL ? sec_flag(&sec, "ping", a, v) : 0;
        if (taken < 0)
            return 2;
        if (taken > 0) {
            i++;
            continue;
        }
        if (strcmp(a, "--id") == 0) {
            if (!parse_num("--id", v, 1, UINT32_MAX - 1, &id))
                return 2;
        } else if (strcmp(a, "--count") == 0) {
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
    if (sec.bare) {
        fprintf(stderr, "troupe ping: --peer wants ID=URL (the node pinged "
                        "is the URL argument)\n");
        return 2;
    }
    troupe_node_opts no = {0};
    int bad = sec_opts(&sec, "ping", &no);
    if (bad != 0)
        return bad;
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
        } else if (strncmp(url, "tls+tcp://", 10) == 0)
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
                                            : 0x70000000u | (uint32_t)getpid()};
    troupe_err e = troupe_runtime_create(&rt, &ro);
    if (e != TROUPE_OK)
        return failed("runtime", e);
    int rc = 0;
    uint32_t peer = 0;
    if ((e = troupe_node_create(&node, rt, &no)) != TROUPE_OK ||
        (e = troupe_node_listen(node, listen)) != TROUPE_OK) {
        rc = failed("transport", e);
        goto out;
    }
    e = troupe_node_connect_wait(node, url, (uint32_t)timeout, &peer);
    if (e == TROUPE_EAUTH || e == TROUPE_EFULL) {
        fprintf(stderr,
                "troupe ping: %s refused us (or failed to prove "
                "who it is)\n",
                url);
        rc = failed("connect", e);
        goto out;
    }
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

/* ---- queue ---- */

typedef struct qenv {
    troupe_db *db;
    troupe_commit *commit;
    troupe_runtime *rt;
    troupe_queues *qs;
} qenv;

static void
qenv_close(qenv *q)
{
    troupe_queues_destroy(q->qs); /* stops them first */
    if (q->rt != NULL) {
        troupe_runtime_shutdown_wait(q->rt);
        troupe_runtime_destroy(q->rt);
    }
    troupe_commit_destroy(q->commit);
    if (q->db != NULL)
        troupe_db_close(q->db);
}

/* 0, or 1 with the message printed (and everything closed). */
static int
qenv_open(const char *data, qenv *q)
{
    memset(q, 0, sizeof(*q));
    if (access(data, F_OK) != 0) { /* opening would create it */
        fprintf(stderr, "troupe queue: no database at %s\n", data);
        return 1;
    }
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    o.create_if_missing = false;
    troupe_err e = troupe_db_open(data, &o, &q->db);
    if (e != TROUPE_OK)
        return failed("open database", e);
    troupe_runtime_opts ro = {.schedulers = 1, .workers = 2};
    const char *what = "start";
    if ((e = troupe_commit_create(q->db, NULL, &q->commit)) == TROUPE_OK &&
        (e = troupe_runtime_create(&q->rt, &ro)) == TROUPE_OK) {
        what = "open queues";
        troupe_queues_opts qo = {.rt = q->rt, .db = q->db, .commit = q->commit};
        e = troupe_queues_open(&qo, &q->qs);
    }
    if (e != TROUPE_OK) {
        qenv_close(q);
        return failed(what, e);
    }
    return 0;
}

static void
print_hex(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        printf("%02x", p[i]);
}

/* Printable ASCII as "text", anything else as 0x<hex>. */
static void
print_bytes(const uint8_t *p, size_t n)
{
    bool text = n > 0;
    for (size_t i = 0; i < n && text; i++)
        text = p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' && p[i] != '\\';
    if (text) {
        printf("\"%.*s\"", (int)n, (const char *)p);
    } else {
        printf("0x");
        print_hex(p, n);
    }
}

/* Decodes HEX into a new buffer (troupe_free); false when it is not an
 * even number of hex digits, at least one byte. */
static bool
parse_hex(const char *s, uint8_t **out, size_t *n)
{
    size_t len = strlen(s);
    if (len == 0 || len % 2 != 0)
        return false;
    uint8_t *b = troupe_malloc(len / 2);
    if (b == NULL)
        return false;
    for (size_t i = 0; i < len / 2; i++) {
        unsigned v = 0;
        for (int k = 0; k < 2; k++) {
            char c = s[2 * i + (size_t)k];
            unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                         : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                         : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                                : 16u;
            if (d == 16) {
                troupe_free(b);
                return false;
            }
            v = v << 4 | d;
        }
        b[i] = (uint8_t)v;
    }
    *out = b;
    *n = len / 2;
    return true;
}

/* One invocation, one line; `full`: the whole payload and the storage
 * key (show), else payloads past 64 bytes are cut. */
static void
print_item(const troupe_queue_item *it, bool full)
{
    printf("%s partition %u time_ms %lld order %llu",
           it->completed ? "completed" : "pending", it->partition,
           (long long)it->time_ms, (unsigned long long)it->order);
    if (it->completed)
        printf(" processed_ms %lld", (long long)it->processed_ms);
    printf(" id ");
    print_bytes(it->id, it->id_len);
    printf(" key ");
    print_bytes(it->key, it->key_len);
    printf(" owner ");
    if (it->owner_kind != NULL) {
        print_bytes(it->owner_kind, it->owner_kind_len);
        printf("/");
        print_bytes(it->owner_id, it->owner_id_len);
    } else {
        printf("-");
    }
    size_t pl = full || it->payload_len <= 64 ? it->payload_len : 64;
    printf(" payload %zu bytes 0x", it->payload_len);
    print_hex(it->payload, pl);
    if (pl < it->payload_len)
        printf("...");
    if (full) {
        printf(" skey ");
        print_hex(it->skey, it->skey_len);
    }
    printf("\n");
}

static int
queue_failed(const char *queue, const char *what, troupe_err e)
{
    if (e == TROUPE_ENOENT && queue != NULL) {
        fprintf(stderr, "troupe queue: no queue named '%s'\n", queue);
        return 1;
    }
    return failed(what, e);
}

static int
queue_list(qenv *q)
{
    troupe_queue_info *info = NULL;
    size_t n = 0;
    troupe_err e = troupe_queues_list(q->qs, &info, &n);
    if (e != TROUPE_OK)
        return failed("list queues", e);
    printf("queues %zu\n", n);
    for (size_t i = 0; i < n; i++)
        printf("queue %s id %llu partitions %u retention_ms %lld\n",
               info[i].name, (unsigned long long)info[i].id, info[i].partitions,
               (long long)info[i].retention_ms);
    troupe_free(info);
    return 0;
}

static int
queue_stats(qenv *q, const char *queue)
{
    troupe_queue_stats *st = NULL;
    troupe_err e = troupe_queue_stats_wait(q->qs, queue, &st);
    if (e != TROUPE_OK)
        return queue_failed(queue, "stats", e);
    printf("queue %s partitions %u pending %llu completed %llu malformed "
           "%llu\n",
           queue, st->partitions, (unsigned long long)st->pending,
           (unsigned long long)st->completed,
           (unsigned long long)st->malformed);
    if (st->oldest_due_ms < 0) {
        printf("oldest_due_ms - lag_ms -\n");
    } else {
        int64_t lag = troupe_now_ms() - st->oldest_due_ms;
        printf("oldest_due_ms %lld lag_ms %lld\n", (long long)st->oldest_due_ms,
               (long long)(lag > 0 ? lag : 0));
    }
    for (uint32_t p = 0; p < st->partitions; p++)
        printf("partition %u pending %llu completed %llu\n", p,
               (unsigned long long)st->pending_by_p[p],
               (unsigned long long)st->completed_by_p[p]);
    troupe_free(st);
    return 0;
}

static int
queue_page(qenv *q, const char *queue, troupe_queue_state state,
           const uint8_t *after, size_t after_len, long limit)
{
    troupe_queue_page *pg = NULL;
    troupe_err e = troupe_queue_list_wait(q->qs, queue, state, after, after_len,
                                          (size_t)limit, &pg);
    if (e == TROUPE_ERANGE) {
        fprintf(stderr,
                "troupe queue: --after is not a %s cursor of this "
                "queue\n",
                state == TROUPE_QUEUE_PENDING ? "pending" : "completed");
        return 1;
    }
    if (e != TROUPE_OK)
        return queue_failed(queue, "list", e);
    for (size_t i = 0; i < pg->n; i++)
        print_item(&pg->items[i], false);
    printf("page %zu more %s cursor ", pg->n, pg->more ? "yes" : "no");
    if (pg->n > 0)
        print_hex(pg->cursor, pg->cursor_len);
    else
        printf("-");
    printf("\n");
    troupe_queue_page_destroy(pg);
    return 0;
}

static int
queue_show(qenv *q, const char *queue, const uint8_t *id, size_t id_len)
{
    troupe_queue_page *pg = NULL;
    troupe_err e = troupe_queue_lookup_wait(q->qs, queue, id, id_len, &pg);
    if (e != TROUPE_OK)
        return queue_failed(queue, "show", e);
    for (size_t i = 0; i < pg->n; i++)
        print_item(&pg->items[i], true);
    size_t n = pg->n;
    troupe_queue_page_destroy(pg);
    if (n == 0) {
        fprintf(stderr, "troupe queue: no event with that id in '%s'\n", queue);
        return 1;
    }
    printf("invocations %zu\n", n);
    return 0;
}

static int
cmd_queue(int argc, char **argv)
{
    if (argc < 1)
        return usage();
    const char *sub = argv[0];
    enum { Q_LIST, Q_STATS, Q_PENDING, Q_COMPLETED, Q_SHOW } kind;
    if (strcmp(sub, "list") == 0)
        kind = Q_LIST;
    else if (strcmp(sub, "stats") == 0)
        kind = Q_STATS;
    else if (strcmp(sub, "pending") == 0)
        kind = Q_PENDING;
    else if (strcmp(sub, "completed") == 0)
        kind = Q_COMPLETED;
    else if (strcmp(sub, "show") == 0)
        kind = Q_SHOW;
    else {
        if (strcmp(sub, "pause") == 0 || strcmp(sub, "resume") == 0)
            fprintf(stderr,
                    "troupe queue: %s is not a command: a pause "
                    "lives in the memory of the process that "
                    "paused, so a command could not make it "
                    "last\n",
                    sub);
        else
            fprintf(stderr, "troupe queue: unknown subcommand '%s'\n", sub);
        return usage();
    }
    const char *data = NULL, *queue = NULL, *after = NULL, *id = NULL,
               *id_hex = NULL;
    long limit = 100;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) {
            fprintf(stderr, "troupe queue %s: %s needs a value\n", sub, a);
            return usage();
        }
        bool paged = kind == Q_PENDING || kind == Q_COMPLETED;
        if (strcmp(a, "--data") == 0) {
            data = v;
        } else if (strcmp(a, "--queue") == 0 && kind != Q_LIST) {
            queue = v;
        } else if (strcmp(a, "--limit") == 0 && paged) {
            if (!parse_num("--limit", v, 1, TROUPE_QUEUE_PAGE_MAX, &limit))
                return 2;
        } else if (strcmp(a, "--after") == 0 && paged) {
            after = v;
        } else if (strcmp(a, "--id") == 0 && kind == Q_SHOW) {
            id = v;
        } else if (strcmp(a, "--id-hex") == 0 && kind == Q_SHOW) {
            id_hex = v;
        } else {
            fprintf(stderr, "troupe queue %s: unknown flag %s\n", sub, a);
            return usage();
        }
    }
    if (data == NULL || (kind != Q_LIST && queue == NULL)) {
        fprintf(stderr, "troupe queue %s: --data%s required\n", sub,
                kind != Q_LIST ? " and --queue are" : " is");
        return usage();
    }
    if (kind == Q_SHOW && (id == NULL) == (id_hex == NULL)) {
        fprintf(stderr, "troupe queue show: give --id or --id-hex\n");
        return usage();
    }
    uint8_t *cur = NULL, *idb = NULL;
    size_t cur_len = 0, idb_len = 0;
    if (after != NULL && !parse_hex(after, &cur, &cur_len)) {
        fprintf(stderr,
                "troupe queue %s: --after wants the hex cursor a "
                "page printed, got '%s'\n",
                sub, after);
        return 2;
    }
    if (id_hex != NULL && !parse_hex(id_hex, &idb, &idb_len)) {
        fprintf(stderr,
                "troupe queue show: --id-hex wants hex digits, got "
                "'%s'\n",
                id_hex);
        troupe_free(cur);
        return 2;
    }
    if (id != NULL && (*id == '\0' || strlen(id) > TROUPE_QUEUE_ID_MAX)) {
        fprintf(stderr, "troupe queue show: --id wants 1..%d bytes\n",
                TROUPE_QUEUE_ID_MAX);
        troupe_free(cur);
        return 2;
    }
    qenv q;
    int rc = qenv_open(data, &q);
    if (rc == 0) {
        switch (kind) {
        case Q_LIST:
            rc = queue_list(&q);
            break;
        case Q_STATS:
            rc = queue_stats(&q, queue);
            break;
        case Q_PENDING:
        case Q_COMPLETED:
            rc = queue_page(&q, queue,
                            kind == Q_PENDING ? TROUPE_QUEUE_PENDING
                                              : TROUPE_QUEUE_COMPLETED,
                            cur, cur_len, limit);
            break;
        case Q_SHOW:
            rc = id != NULL
                     ? queue_show(&q, queue, (const uint8_t *)id, strlen(id))
                     : queue_show(&q, queue, idb, idb_len);
            break;
        }
        qenv_close(&q);
    }
    troupe_free(cur);
    troupe_free(idb);
    return rc;
}

int
main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    setvbuf(stdout, NULL, _IOLBF, 0);
    if ((strcmp(argv[1], "version") == 0 ||
         strcmp(argv[1], "--version") == 0) &&
        argc == 2) {
        printf("troupe %s\n", troupe_version());
        return 0;
    }
    if (strcmp(argv[1], "node") == 0)
        return cmd_node(argc - 2, argv + 2);
    if (strcmp(argv[1], "ping") == 0)
        return cmd_ping(argc - 2, argv + 2);
    if (strcmp(argv[1], "stats") == 0)
        return cmd_stats(argc - 2, argv + 2);
    if (strcmp(argv[1], "queue") == 0)
        return cmd_queue(argc - 2, argv + 2);
    fprintf(stderr, "troupe: unknown command '%s'\n", argv[1]);
    return usage();
}
