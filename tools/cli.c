/*
 * Option parsing and messages shared by the troupe command's commands.
 *
 * getopt_long with opterr off and a leading ':' in every optstring, so
 * that a missing value and an unknown flag come back to us (':' and '?')
 * and are told in our words, naming the flag, followed by the command's
 * usage line: a user who mistyped sees what was wrong and what is right
 * in one screen. Both `--flag=value` and `--flag value` work (getopt).
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

void
cli_getopt_reset(void)
{
    optind = 0; /* glibc: 0 starts a new scan, resetting its state */
    opterr = 0;
}

int
cli_help(const cli_cmd *c)
{
    printf("usage: troupe %s\n\n%s", c->synopsis, c->help);
    return 0;
}

static void
usage_tail(const cli_cmd *c)
{
    fprintf(stderr, "usage: troupe %s\nTry 'troupe %s --help' for more.\n",
            c->synopsis, c->name);
}

int
cli_usage(const cli_cmd *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "troupe %s: ", c->name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    usage_tail(c);
    return CLI_USAGE;
}

int
cli_sub_pick(const cli_cmd *top, int argc, char **argv, const char *which,
             const cli_cmd *(*find)(const char *name), const cli_cmd **out)
{
    if (argc < 1)
        return cli_usage(top, "which subcommand? %s", which);
    const char *sub = argv[0];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0)
        return cli_help(top);
    if ((*out = find(sub)) == NULL)
        return cli_usage(top, "unknown subcommand '%s'", sub);
    return -1;
}

int
cli_bad_option(const cli_cmd *c, int ch, char **argv)
{
    const char *arg = optind > 0 ? argv[optind - 1] : "";
    /* "--flag=value": name the flag alone */
    int n = (int)strcspn(arg, "=");
    if (ch == ':')
        return cli_usage(c, "%.*s needs a value", n, arg);
    if (optopt != 0 && strncmp(arg, "--", 2) != 0)
        return cli_usage(c, "unknown flag -%c", optopt);
    if (arg[n] == '=' && optopt != 0)
        return cli_usage(c, "%.*s takes no value", n, arg);
    return cli_usage(c, "unknown flag %.*s", n, arg);
}

int
cli_common_flag(const cli_cmd *c, int ch, char **argv, troupe_log_level *level)
{
    if (ch == 'h')
        return cli_help(c);
    if (ch == OPT_LOG_LEVEL)
        return cli_log_level(c, optarg, level) ? CLI_CONTINUE : CLI_USAGE;
    return cli_bad_option(c, ch, argv);
}

int
cli_operands(const cli_cmd *c, int argc, char **argv, int want,
             const char *missing)
{
    if (argc - optind < want)
        return cli_usage(c, "%s", missing);
    if (argc - optind > want)
        return cli_usage(c, "unexpected argument '%s'", argv[optind + want]);
    return CLI_CONTINUE;
}

int
cli_failed(const char *what, troupe_err e)
{
    fprintf(stderr, "troupe: %s: %s (%s)\n", what, troupe_errmsg(e),
            troupe_err_name(e));
    return CLI_FAIL;
}

/* The stop's rendezvous; on the heap, since a stop that never ends keeps
 * a pointer to it (the process then ends without freeing it). */
struct node_stop {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
};

static void
node_stopped(troupe_node *n, void *arg)
{
    (void)n;
    struct node_stop *s = arg;
    pthread_mutex_lock(&s->mu);
    s->done = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

bool
cli_node_stop(troupe_node *node)
{
    struct node_stop *s = malloc(sizeof(*s));
    if (s == NULL) /* no room to wait with: wait without a deadline */
        return troupe_node_stop_wait(node) == TROUPE_OK;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    s->done = false;
    if (troupe_node_stop(node, node_stopped, s) != TROUPE_OK) {
        free(s);
        return true; /* stopped already */
    }
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += CLI_NODE_STOP_MS / 1000;
    pthread_mutex_lock(&s->mu);
    int rv = 0;
    while (!s->done && rv != ETIMEDOUT)
        rv = pthread_cond_timedwait(&s->cv, &s->mu, &end);
    bool done = s->done;
    pthread_mutex_unlock(&s->mu);
    if (!done) {
        fprintf(stderr,
                "troupe: the transport did not finish closing its "
                "connections in %d s (nng 1.5.2 can wedge its teardown); "
                "ending without it\n",
                CLI_NODE_STOP_MS / 1000);
        return false;
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    return true;
}

bool
cli_num(const cli_cmd *c, const char *flag, const char *s, long lo, long hi,
        long *out)
{
    char *end = NULL;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (s == NULL || *s == '\0' || errno || *end || v < lo || v > hi) {
        cli_usage(c, "%s wants a number in %ld..%ld, got '%s'", flag, lo, hi,
                  s ? s : "");
        return false;
    }
    *out = v;
    return true;
}

bool
cli_url(const cli_cmd *c, const char *flag, const char *url, bool remote)
{
    static const char *const schemes[] = {"tcp", "tls+tcp", "ipc", "inproc"};
    const char *sep = strstr(url, "://");
    if (sep == NULL || sep == url) {
        cli_usage(c,
                  "%s wants a URL (tcp://HOST:PORT, tls+tcp://HOST:PORT "
                  "or ipc://PATH), got '%s'",
                  flag, url);
        return false;
    }
    size_t n = (size_t)(sep - url);
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++) {
        if (strlen(schemes[i]) == n && strncmp(url, schemes[i], n) == 0) {
            if (remote && strcmp(schemes[i], "inproc") == 0) {
                cli_usage(c,
                          "%s %s: inproc:// URLs exist only inside one "
                          "process",
                          flag, url);
                return false;
            }
            if (sep[3] == '\0') {
                cli_usage(c, "%s %s: the URL names no address", flag, url);
                return false;
            }
            return true;
        }
    }
    cli_usage(c,
              "%s %s: unknown URL scheme '%.*s' (tcp://, tls+tcp:// or "
              "ipc://)",
              flag, url, (int)n, url);
    return false;
}

bool
cli_log_level(const cli_cmd *c, const char *s, troupe_log_level *out)
{
    static const troupe_log_level levels[] = {
        TROUPE_LOG_ERROR, TROUPE_LOG_WARN, TROUPE_LOG_INFO, TROUPE_LOG_DEBUG};
    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        if (strcmp(s, troupe_log_level_name(levels[i])) == 0) {
            *out = levels[i];
            return true;
        }
    }
    cli_usage(c, "--log-level wants error, warn, info or debug, got '%s'", s);
    return false;
}

/* ---- security flags ---------------------------------------------------- */

int
cli_sec_flag(cli_sec *f, const cli_cmd *c, int ch, const char *v)
{
    switch (ch) {
    case OPT_SECRET_FILE:
        f->secret_file = v;
        return 1;
    case OPT_TLS_CERT:
        f->cert = v;
        return 1;
    case OPT_TLS_KEY:
        f->key = v;
        return 1;
    case OPT_TLS_CA:
        f->ca = v;
        return 1;
    case OPT_PEER:
        break;
    default:
        return 0;
    }
    if (f->n_dial == CLI_MAX_PEERS) {
        cli_usage(c, "at most %d peers", CLI_MAX_PEERS);
        return -1;
    }
    const char *eq = strchr(v, '=');
    const char *sep = strstr(v, "://");
    if (eq != NULL && (sep == NULL || eq < sep)) {
        char id[16];
        size_t n = (size_t)(eq - v);
        long num;
        if (n == 0 || n >= sizeof(id)) {
            cli_usage(c, "--peer wants ID=URL or URL, got '%s'", v);
            return -1;
        }
        memcpy(id, v, n);
        id[n] = '\0';
        if (!cli_num(c, "--peer ID", id, 1, UINT32_MAX - 1, &num))
            return -1;
        if (eq[1] == '\0') {
            cli_usage(c, "--peer %s= needs a URL", id);
            return -1;
        }
        if (!cli_url(c, "--peer", eq + 1, true))
            return -1;
        f->peers[f->n_peers++] = (troupe_node_peer){(uint32_t)num, eq + 1};
        f->dial[f->n_dial++] = eq + 1;
    } else {
        if (!cli_url(c, "--peer", v, true))
            return -1;
        f->bare = true;
        f->dial[f->n_dial++] = v;
    }
    return 1;
}

bool
cli_read_secret(const cli_cmd *c, const char *flag, const char *path, char *buf,
                size_t max, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        cli_usage(c, "cannot read %s %s: %s", flag, path, strerror(errno));
        return false;
    }
    size_t n = fread(buf, 1, max + 1, fp);
    fclose(fp);
    if (n > max) {
        cli_usage(c, "%s %s is over %zu bytes", flag, path, max);
        return false;
    }
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    if (n > 0 && buf[n - 1] == '\r')
        n--;
    if (n < 16) {
        cli_usage(c, "the secret in %s is %zu bytes; at least 16 are needed",
                  path, n);
        return false;
    }
    buf[n] = '\0';
    *len = n;
    return true;
}

int
cli_sec_opts(cli_sec *f, const cli_cmd *c, troupe_node_opts *o)
{
    int tls = (f->cert != NULL) + (f->key != NULL) + (f->ca != NULL);
    if (tls != 0 && tls != 3)
        return cli_usage(c, "--tls-cert, --tls-key and --tls-ca go together");
    if (f->bare && f->n_peers > 0)
        return cli_usage(c, "with an allow-list (--peer ID=URL) every --peer "
                            "needs its ID");
    if (f->secret_file != NULL &&
        !cli_read_secret(c, "--secret-file", f->secret_file, f->secret,
                         CLI_SECRET_MAX, &f->secret_len))
        return CLI_USAGE;
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
