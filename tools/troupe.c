/*
 * The troupe command: main and dispatch. One file per command (cmd_*.c),
 * the shared option handling in cli.c; troupe.1 is the manual, and a test
 * (tests/integration/cli_help.sh) checks that every command and flag the
 * --help texts list is in it.
 *
 *   troupe node    run a node
 *   troupe ping    round trips to a node
 *   troupe stats   a database's figures (read-only)
 *   troupe queue   inspect a database's queues (or a node's, and act)
 *   troupe gtx     a running node's global transactions: list, act
 *   troupe table, troupe index, troupe kv   a running node's data
 *   troupe cluster what etcd holds for a cluster: its nodes
 *   troupe version, troupe --version
 *   troupe help [COMMAND [SUBCOMMAND]], troupe [COMMAND] --help
 *
 * Exit status: 0 success, 1 failure, 2 usage error (what was wrong is
 * said, then the usage line).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "troupe/version.h"

typedef struct command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
    const cli_cmd *texts;
} command;

static const command commands[] = {
    {"node", "run a node: open the database, serve it, listen, dial peers",
     cmd_node, &cli_node_cmd},
    {"ping", "measure round trips to a running node", cmd_ping, &cli_ping_cmd},
    {"stats", "print a database's figures (read-only; --tables: the tables')",
     cmd_stats, &cli_stats_cmd},
    {"queue",
     "a database's or a running node's queues: list, stats, pending, ..., "
     "pause",
     cmd_queue, &cli_queue_cmd},
    {"gtx", "a running node's global transactions (--admin): list, show, abort",
     cmd_gtx, &cli_gtx_cmd},
    {"table", "a running node's rows (--admin): get, scan", cmd_table,
     &cli_table_cmd},
    {"index", "a running node's indexes (--admin): state, rebuild", cmd_index,
     &cli_index_cmd},
    {"kv", "a running node's kv values (--admin): get, put", cmd_kv,
     &cli_kv_cmd},
    {"cluster", "what etcd holds for a cluster: nodes", cmd_cluster,
     &cli_cluster_cmd},
    {"version", "print troupe's version", NULL, NULL},
    {"help", "print this help, or a command's: troupe help COMMAND [SUB]", NULL,
     NULL},
};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void
top_help(FILE *to)
{
    fprintf(to, "usage: troupe COMMAND [FLAGS]...\n"
                "\n"
                "Commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(to, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(to, "\n"
                "Flags:\n"
                "  -h, --help     this help; after a command, the command's\n"
                "      --version  print troupe's version\n"
                "\n"
                "Exit status: 0 success, 1 failure, 2 usage error.\n"
                "The manual: man troupe (tools/troupe.1).\n");
}

static const command *
find(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++) {
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    }
    return NULL;
}

static int
unknown(const char *what)
{
    fprintf(stderr, "troupe: unknown command '%s'\n", what);
    top_help(stderr);
    return CLI_USAGE;
}

static int
help(int argc, char **argv)
{
    if (argc == 0) {
        top_help(stdout);
        return 0;
    }
    const command *c = find(argv[0]);
    if (c == NULL)
        return unknown(argv[0]);
    if (c->texts == NULL) {
        printf("troupe %s: %s\n", c->name, c->summary);
        return 0;
    }
    if ((c->run == cmd_queue || c->run == cmd_gtx) && argc > 1) {
        const cli_cmd *sub =
            c->run == cmd_queue ? cli_queue_sub(argv[1]) : cli_gtx_sub(argv[1]);
        if (sub == NULL)
            return cli_usage(c->texts, "unknown subcommand '%s'", argv[1]);
        return cli_help(sub);
    }
    if (c->run == cmd_table || c->run == cmd_index || c->run == cmd_kv) {
        if (argc > 1) {
            const cli_cmd *sub = cli_data_sub(c->name, argv[1]);
            if (sub == NULL)
                return cli_usage(c->texts, "unknown subcommand '%s'", argv[1]);
            return cli_help(sub);
        }
    }
    return cli_help(c->texts);
}

static int
version(int argc)
{
    if (argc > 0) {
        fprintf(stderr, "troupe version: takes no arguments\n");
        return CLI_USAGE;
    }
    printf("troupe %s\n", troupe_version());
    return 0;
}

int
main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "troupe: which command?\n");
        top_help(stderr);
        return CLI_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        return help(0, NULL);
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0)
        return version(argc - 2);
    if (strcmp(cmd, "help") == 0)
        return help(argc - 2, argv + 2);
    const command *c = find(cmd);
    if (c == NULL || c->run == NULL) {
        if (cmd[0] == '-') {
            fprintf(stderr,
                    "troupe: unknown flag %s (flags follow the "
                    "command)\n",
                    cmd);
            top_help(stderr);
            return CLI_USAGE;
        }
        return unknown(cmd);
    }
    /* queue's entry (and gtx's, table's, index's, kv's, cluster's) takes its
     * subcommand as argv[0]; the others get their own name there, as
     * getopt_long wants a program name first. */
    if (c->run == cmd_queue || c->run == cmd_gtx || c->run == cmd_table ||
        c->run == cmd_index || c->run == cmd_kv || c->run == cmd_cluster)
        return c->run(argc - 2, argv + 2);
    return c->run(argc - 1, argv + 1);
}
