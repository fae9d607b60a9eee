/*
 * Runs a peer benchmark (bench/peers) from a troupe benchmark and returns
 * its figure. Every peer prints human-readable lines on stderr (passed
 * through) and one number, the median of its reps, on its last stdout line.
 * The peers live in $TROUPE_PEERS_DIR (bench/run.sh sets it to
 * BUILD_DIR/bench/peers); $BENCH_REPS is inherited by the peer.
 *
 *   double caf = bench_run_peer("peer_caf_pingpong", NULL);
 *   double nng = bench_run_peer("peer_nng_oneway", "64");
 *
 * Needs popen (POSIX): the build defines _GNU_SOURCE for every target.
 */
#ifndef TROUPE_PEER_RUN_H
#define TROUPE_PEER_RUN_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* Appends s to buf as one single-quoted shell word; 0, or -1 if it does
 * not fit. */
static inline int
bench_peer_quote(char *buf, size_t cap, size_t *len, const char *s)
{
    if (*len + 1 >= cap)
        return -1;
    buf[(*len)++] = '\'';
    for (; *s; s++) {
        const char *piece = *s == '\'' ? "'\\''" : NULL;
        size_t n = piece ? strlen(piece) : 1;
        if (*len + n + 2 >= cap)
            return -1;
        if (piece)
            memcpy(buf + *len, piece, n);
        else
            buf[*len] = *s;
        *len += n;
    }
    buf[(*len)++] = '\'';
    buf[*len] = '\0';
    return 0;
}

/* Runs "$TROUPE_PEERS_DIR/<name> [arg]" and returns the number on its last
 * stdout line, or -1 (with a message on stderr) if the peer cannot be run,
 * fails, or prints no number. */
static inline double
bench_run_peer(const char *name, const char *arg)
{
    const char *dir = getenv("TROUPE_PEERS_DIR");
    char cmd[4096], path[4096], line[512], last[512];
    size_t len = 0;
    FILE *p;
    int st;
    double v;
    char *end;

    if (!dir || !*dir) {
        fprintf(stderr,
                "bench_run_peer: TROUPE_PEERS_DIR is not set "
                "(run through bench/run.sh); skipping %s\n",
                name);
        return -1;
    }
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path ||
        bench_peer_quote(cmd, sizeof cmd, &len, path) != 0)
        goto too_long;
    if (arg) {
        cmd[len++] = ' ';
        if (bench_peer_quote(cmd, sizeof cmd, &len, arg) != 0)
            goto too_long;
    }
    fflush(stdout);
    fflush(stderr);
    p = popen(cmd, "r");
    if (!p) {
        perror("bench_run_peer: popen");
        return -1;
    }
    last[0] = '\0';
    while (fgets(line, sizeof line, p)) {
        if (line[strspn(line, " \t\r\n")] != '\0')
            memcpy(last, line, sizeof last);
    }
    st = pclose(p);
    if (st == -1) {
        perror("bench_run_peer: pclose");
        return -1;
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        if (WIFEXITED(st) && (WEXITSTATUS(st) == 127 || WEXITSTATUS(st) == 126))
            fprintf(stderr, "bench_run_peer: %s not found or not runnable\n",
                    path);
        else if (WIFEXITED(st))
            fprintf(stderr, "bench_run_peer: %s %s exited with status %d\n",
                    path, arg ? arg : "", WEXITSTATUS(st));
        else
            fprintf(stderr, "bench_run_peer: %s %s killed by signal %d\n", path,
                    arg ? arg : "", WIFSIGNALED(st) ? WTERMSIG(st) : -1);
        return -1;
    }
    v = strtod(last, &end);
    if (end == last || end[strspn(end, " \t\r\n")] != '\0' || !(v >= 0)) {
        fprintf(stderr,
                "bench_run_peer: %s printed no number on its last "
                "line (got \"%.60s\")\n",
                path, last);
        return -1;
    }
    return v;

too_long:
    fprintf(stderr, "bench_run_peer: command for %s too long\n", name);
    return -1;
}

#endif
