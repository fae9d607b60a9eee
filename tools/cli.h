/*
 * Private to tools/: what the troupe command's files share. Each command
 * is one cmd_*.c with an entry point taking the arguments after its name;
 * cli.c holds the option parsing, the usage and failure messages and the
 * checks every command makes of numbers, URLs and log levels.
 *
 * Exit status: 0 success, CLI_FAIL (1) when the command ran and failed,
 * CLI_USAGE (2) when it was called wrongly (a message says what was
 * wrong, then the command's usage line).
 */
#ifndef TROUPE_TOOLS_CLI_H
#define TROUPE_TOOLS_CLI_H

#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "troupe/err.h"
#include "troupe/log.h"
#include "troupe/transport.h"

#define CLI_FAIL 1
#define CLI_USAGE 2

/* A command's texts: name as typed ("queue pending"), its usage line(s)
 * after "troupe ", and the body of its --help. */
typedef struct cli_cmd {
    const char *name;
    const char *synopsis;
    const char *help;
} cli_cmd;

/* Prints "usage: troupe <synopsis>" and the help to stdout; returns 0. */
int
cli_help(const cli_cmd *c);

/* Prints "troupe <name>: <message>", the usage line and where to find
 * more, to stderr; returns CLI_USAGE. */
int
cli_usage(const cli_cmd *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The prologue of a command with subcommands (troupe queue, troupe gtx):
 * argv[0] names one, found by find (NULL when unknown); `which` lists
 * them for the usage message. Returns -1 with *out the subcommand, or
 * the exit code of what was printed instead (its help, a usage error). */
int
cli_sub_pick(const cli_cmd *top, int argc, char **argv, const char *which,
             const cli_cmd *(*find)(const char *name), const cli_cmd **out);

/* getopt_long's '?' or ':' for the option argv[optind - 1]: names the
 * unknown flag, the flag without its value, or the value a flag does not
 * take. Returns CLI_USAGE. */
int
cli_bad_option(const cli_cmd *c, int ch, char **argv);

/* Resets getopt for a new parse (glibc: optind 0) and silences its own
 * messages: cli_bad_option prints ours. */
void
cli_getopt_reset(void);

/* Returned by the helpers below when the command goes on. */
#define CLI_CONTINUE (-1)

/* In every command's option table: --log-level and -h/--help. */
#define CLI_COMMON_OPTIONS                                                     \
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},                     \
    {                                                                          \
        "help", no_argument, NULL, 'h'                                         \
    }

/*
 * Every option a command's switch does not take itself: --log-level
 * (parsed into *level: CLI_CONTINUE), -h/--help (help printed: 0), and
 * anything else, an error getopt_long reported (CLI_USAGE, message
 * printed).
 */
int
cli_common_flag(const cli_cmd *c, int ch, char **argv, troupe_log_level *level);

/* After the options: CLI_CONTINUE when argv[optind..] holds exactly
 * `want` operands, else CLI_USAGE naming the first one too many (or,
 * for a missing one, saying `missing`). */
int
cli_operands(const cli_cmd *c, int argc, char **argv, int want,
             const char *missing);

/* "troupe: <what>: <text> (<NAME>)"; returns CLI_FAIL. */
int
cli_failed(const char *what, troupe_err e);

/* How long a command waits for its transport node to stop. */
#define CLI_NODE_STOP_MS 10000

/*
 * Stops node and waits for it, at most CLI_NODE_STOP_MS. nng 1.5.2 can
 * wedge its own teardown for good (its reaper waits on a receive that
 * never completes; docs/wire.md, "Shutdown"); a command whose work is done
 * must still end then. True once the node has stopped (destroy it); false,
 * with a line on stderr, when it did not in time: the node and the
 * runtime it delivers to must then be left as they are (neither destroyed)
 * and the process ended with _exit once the rest is closed.
 */
bool
cli_node_stop(troupe_node *node);

/* A decimal in [lo, hi] (false, message printed naming the flag and the
 * value given, otherwise). */
bool
cli_num(const cli_cmd *c, const char *flag, const char *s, long lo, long hi,
        long *out);

/* A URL of a scheme the transport knows (tcp://, tls+tcp://, ipc://, and
 * inproc:// unless `remote`): false with the message naming the scheme
 * or the missing "://". */
bool
cli_url(const cli_cmd *c, const char *flag, const char *url, bool remote);

/* error, warn, info or debug (false with a message otherwise). */
bool
cli_log_level(const cli_cmd *c, const char *s, troupe_log_level *out);

/* The flags the node and ping commands share: the cluster's security
 * (docs/security.md) and --peer. */
#define CLI_MAX_PEERS 64
#define CLI_SECRET_MAX 4096

typedef struct cli_sec {
    const char *secret_file;
    const char *cert, *key, *ca;
    troupe_node_peer peers[CLI_MAX_PEERS]; /* ID=URL entries */
    uint32_t n_peers;
    const char *dial[CLI_MAX_PEERS]; /* every --peer's URL, in order */
    uint32_t n_dial;
    bool bare; /* a --peer without ID= */
    char secret[CLI_SECRET_MAX + 1];
    size_t secret_len;
} cli_sec;

/* Option values of the shared flags, for the commands' option tables. */
enum {
    OPT_SECRET_FILE = 1000,
    OPT_TLS_CERT,
    OPT_TLS_KEY,
    OPT_TLS_CA,
    OPT_PEER,
    OPT_LOG_LEVEL,
    OPT_ADMIN_URL,
    OPT_ADMIN_TOKEN_FILE,
    OPT_JSON,
    OPT_FIRST_OWN /* a command's own options start here */
};

#define CLI_SEC_OPTIONS                                                        \
    {"secret-file", required_argument, NULL, OPT_SECRET_FILE},                 \
        {"tls-cert", required_argument, NULL, OPT_TLS_CERT},                   \
        {"tls-key", required_argument, NULL, OPT_TLS_KEY},                     \
        {"tls-ca", required_argument, NULL, OPT_TLS_CA},                       \
    {                                                                          \
        "peer", required_argument, NULL, OPT_PEER                              \
    }

/* Takes option ch (with optarg) if it is a security flag or --peer: 1
 * taken, 0 not one, -1 bad (message printed). */
int
cli_sec_flag(cli_sec *f, const cli_cmd *c, int ch, const char *v);

/* Reads a secret (the cluster's, or the admin endpoint's token) from the
 * file of `flag`: one trailing newline (and a CR before it) is not part
 * of it; 16..max bytes, NUL-terminated in buf (max + 1 bytes). False with
 * the message printed otherwise. */
bool
cli_read_secret(const cli_cmd *c, const char *flag, const char *path, char *buf,
                size_t max, size_t *len);

/* Checks the flags together, reads the secret and fills o: 0, or
 * CLI_USAGE (message printed). */
int
cli_sec_opts(cli_sec *f, const cli_cmd *c, troupe_node_opts *o);

/*
 * Through a running node (cli_admin.c): the inspection commands take
 * --admin URL (http://HOST:PORT or HOST:PORT, the node's --admin address),
 * --admin-token FILE and --json, and then ask the node's admin endpoint
 * instead of opening a database; the acting commands exist only so.
 */
typedef struct cli_admin {
    bool on;   /* --admin given */
    bool json; /* --json: print the answer's JSON document */
    char url[512];
    const char *token_file;
    char token[CLI_SECRET_MAX + 1];
    size_t token_len;
} cli_admin;

#define CLI_ADMIN_OPTIONS                                                      \
    {"admin", required_argument, NULL, OPT_ADMIN_URL},                         \
        {"admin-token", required_argument, NULL, OPT_ADMIN_TOKEN_FILE},        \
    {                                                                          \
        "json", no_argument, NULL, OPT_JSON                                    \
    }

#define CLI_ADMIN_HELP                                                         \
    "  --admin URL         ask the running node whose admin endpoint is\n"     \
    "                      at URL (http://HOST:PORT) instead of opening\n"     \
    "                      the database\n"                                     \
    "  --admin-token FILE  the endpoint's bearer token\n"                      \
    "  --json              print the endpoint's JSON answer (one line)\n"

/* cli_common_flag for a command that also takes CLI_ADMIN_OPTIONS: those
 * go into *a (CLI_CONTINUE, or CLI_USAGE for a bad --admin URL, message
 * printed), anything else to cli_common_flag. */
int
cli_admin_common_flag(cli_admin *a, const cli_cmd *c, int ch, char **argv,
                      troupe_log_level *level);
/* After the options: reads the token. CLI_CONTINUE, or CLI_USAGE with the
 * message printed. */
int
cli_admin_ready(cli_admin *a, const cli_cmd *c);
/* s percent-encoded for a path segment or query value (free it); NULL on
 * ENOMEM. */
char *
cli_admin_escape(const char *s);
/* One request (body: JSON text or NULL): 0 with *out the answer (the
 * caller json_decrefs it), or CLI_FAIL with what failed printed (an
 * unreachable endpoint, an error answer's status and message). Blocks up
 * to a minute. */
int
cli_admin_request(const cli_admin *a, const char *method, const char *path,
                  const char *body, json_t **out);
/* Prints an answer: `path value` lines, or the JSON with --json. */
void
cli_admin_print(const cli_admin *a, json_t *j);
/* Request and print: 0, or what cli_admin_request returned. */
int
cli_admin_run(const cli_admin *a, const char *method, const char *path,
              const char *body);

int
cmd_node(int argc, char **argv);
int
cmd_ping(int argc, char **argv);
int
cmd_stats(int argc, char **argv);
int
cmd_queue(int argc, char **argv);
int
cmd_gtx(int argc, char **argv);
int
cmd_table(int argc, char **argv);
int
cmd_index(int argc, char **argv);
int
cmd_kv(int argc, char **argv);
int
cmd_cluster(int argc, char **argv);

/* The commands' texts, for `troupe help`. */
extern const cli_cmd cli_node_cmd, cli_ping_cmd, cli_stats_cmd, cli_queue_cmd,
    cli_gtx_cmd, cli_table_cmd, cli_index_cmd, cli_kv_cmd, cli_cluster_cmd;
/* `troupe help table|index|kv SUB`: the subcommand's texts, NULL when
 * unknown. */
const cli_cmd *
cli_data_sub(const char *cmd, const char *name);
/* `troupe help queue SUB`: the subcommand's texts, NULL when unknown. */
const cli_cmd *
cli_queue_sub(const char *name);
/* `troupe help gtx SUB`: the same. */
const cli_cmd *
cli_gtx_sub(const char *name);

#endif
