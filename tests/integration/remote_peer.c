/*
 * The other process of check_remote: a node with one echo actor.
 *
 *   remote_peer NODE_ID LISTEN_URL
 *
 * Listens, registers an actor "echo" that answers every ask with the
 * request's body, prints "ready <advertised url>" on stdout, and runs until
 * its stdin reaches end of file; then it shuts down cleanly and exits 0.
 * Exit status 2 means it could not start (the reason is on stderr).
 */
#include <nng/nng.h>
#include <stdio.h>
#include <stdlib.h>

#include "troupe/actor.h"
#include "troupe/transport.h"

static troupe_err
on_echo(troupe_actor *self, void *state, const troupe_msg *msg)
{
    troupe_msg *r = NULL;
    if (troupe_msg_create(&r, msg->kind, troupe_msg_data(msg),
                          troupe_msg_len(msg)) != TROUPE_OK)
        return TROUPE_ENOMEM;
    if (msg->corr != 0)
        troupe_reply(self, msg, &r);
    else
        troupe_msg_destroy(r);
    return TROUPE_OK;
}

static troupe_err
on_any(troupe_actor *self, void *state, const troupe_msg *msg)
{
    return on_echo(self, state, msg);
}

static const troupe_handler_fn handlers[] = {on_echo};
static const troupe_actor_def echo_def = {
    .name = "echo",
    .handlers = handlers,
    .n_handlers = 1,
    .on_unknown = on_any,
    .remote_kinds = ~UINT64_C(0), /* an echo for tests: every kind */
};

static int
fail(const char *what, troupe_err e)
{
    fprintf(stderr, "remote_peer: %s: %s\n", what, troupe_strerror(e));
    return 2;
}

int
main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: remote_peer NODE_ID LISTEN_URL\n");
        return 2;
    }
    uint32_t id = (uint32_t)strtoul(argv[1], NULL, 10);
    troupe_runtime_opts ro = {.schedulers = 1, .workers = 1, .node_id = id};
    troupe_runtime *rt;
    troupe_node *node;
    troupe_node_opts no = {.unreachable_ms = 500, .reconnect_max_ms = 100};
    troupe_err e = troupe_runtime_create(&rt, &ro);
    if (e != TROUPE_OK)
        return fail("runtime", e);
    if ((e = troupe_node_create(&node, rt, &no)) != TROUPE_OK)
        return fail("node", e);
    if ((e = troupe_node_listen(node, argv[2])) != TROUPE_OK)
        return fail("listen", e);
    troupe_spawn_opts so = TROUPE_SPAWN_OPTS_INIT;
    so.name = "echo";
    troupe_addr echo;
    if ((e = troupe_actor_spawn(rt, &echo_def, &so, &echo)) != TROUPE_OK)
        return fail("spawn", e);
    printf("ready %s\n", troupe_node_url(node));
    fflush(stdout);
    int c;
    while ((c = getchar()) != EOF)
        ;
    troupe_runtime_shutdown_wait(rt);
    troupe_node_stop_wait(node);
    troupe_node_destroy(node);
    troupe_runtime_destroy(rt);
    nng_fini();
    return 0;
}
