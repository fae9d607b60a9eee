/*
 * The flagship's part 2 (main.c): two nodes in one process talking
 * over nng on tcp loopback.
 */
#include "flagship.h"

/* ---- two nodes: a pinger on node 1 asks a ponger on node 2 ---- */

enum { P_PING, P_FOUND, P_PONG, P_NKINDS };

static troupe_err
on_ping(troupe_actor *self, void *st, const troupe_msg *m)
{
    troupe_msg *r = NULL;
    troupe_err e =
        troupe_msg_create(&r, 0, troupe_msg_data(m), troupe_msg_len(m));
    return e == TROUPE_OK ? troupe_reply(self, m, &r) : e;
}

static const troupe_handler_fn ponger_handlers[P_NKINDS] = {[P_PING] = on_ping};
static const troupe_actor_def ponger_def = {.name = "ponger",
                                            .handlers = ponger_handlers,
                                            .n_handlers = P_NKINDS,
                                            .remote_kinds =
                                                TROUPE_KIND_BIT(P_PING)};

typedef struct pinger_cfg {
    uint32_t peer_node;
    long pings;
    latch *done;
    double *seconds;
} pinger_cfg;

typedef struct pinger {
    pinger_cfg cfg;
    troupe_addr ponger;
    long left;
    uint64_t started_ms;
} pinger;

static troupe_err
pinger_init(troupe_actor *self, void *st, void *arg)
{
    pinger *p = st;
    p->cfg = *(const pinger_cfg *)arg;
    /* Find the ponger by name on the other node. */
    troupe_msg *m = NULL;
    troupe_err e = troupe_node_lookup_msg("ponger", &m);
    if (e == TROUPE_OK)
        e = troupe_ask(self, troupe_node_addr(p->cfg.peer_node), &m, 2000,
                       P_FOUND, NULL);
    return e;
}

static troupe_err
ping_once(troupe_actor *self, pinger *p)
{
    troupe_msg *m = NULL;
    troupe_err e = troupe_msg_create(&m, P_PING, "ping", 4);
    if (e == TROUPE_OK)
        e = troupe_ask(self, p->ponger, &m, 2000, P_PONG, NULL);
    return e;
}

static troupe_err
on_found(troupe_actor *self, void *st, const troupe_msg *m)
{
    pinger *p = st;
    troupe_err e = troupe_node_lookup_result(m, &p->ponger);
    if (e != TROUPE_OK) {
        latch_hit(p->cfg.done, e);
        return TROUPE_OK;
    }
    printf("nodes: found ponger at node %u slot %u\n", p->ponger.node,
           p->ponger.slot);
    p->left = p->cfg.pings;
    p->started_ms = uv_hrtime() / 1000000u;
    return ping_once(self, p);
}

static troupe_err
on_pong(troupe_actor *self, void *st, const troupe_msg *m)
{
    pinger *p = st;
    if (m->err != TROUPE_OK) {
        latch_hit(p->cfg.done, m->err);
        return TROUPE_OK;
    }
    if (--p->left > 0)
        return ping_once(self, p);
    *p->cfg.seconds = (double)(uv_hrtime() / 1000000u - p->started_ms) / 1e3;
    latch_hit(p->cfg.done, TROUPE_OK);
    return TROUPE_OK;
}

static const troupe_handler_fn pinger_handlers[P_NKINDS] = {
    [P_FOUND] = on_found, [P_PONG] = on_pong};
static const troupe_actor_def pinger_def = {
    .name = "pinger",
    .state_size = sizeof(pinger),
    .init = pinger_init,
    .handlers = pinger_handlers,
    .n_handlers = P_NKINDS,
};

typedef struct node_pair {
    troupe_runtime *rt[2];
    troupe_node *node[2];
} node_pair;

static troupe_err
start_node(node_pair *np, int i)
{
    troupe_runtime_opts ro = {
        .schedulers = 1, .workers = 1, .node_id = (uint32_t)i + 1};
    troupe_err e = troupe_runtime_create(&np->rt[i], &ro);
    if (e != TROUPE_OK)
        return e;
    e = troupe_node_create(&np->node[i], np->rt[i], NULL);
    if (e == TROUPE_OK)
        e = troupe_node_listen(np->node[i], "tcp://127.0.0.1:0");
    return e;
}

static void
stop_nodes(node_pair *np)
{
    for (int i = 0; i < 2; i++)
        if (np->rt[i] != NULL)
            troupe_runtime_shutdown_wait(np->rt[i]);
    for (int i = 0; i < 2; i++) {
        if (np->node[i] != NULL)
            troupe_node_stop_wait(np->node[i]);
        troupe_node_destroy(np->node[i]);
        troupe_runtime_destroy(np->rt[i]);
    }
}

int
flagship_nodes(long pings)
{
    printf("== two nodes over tcp loopback ==\n");
    node_pair np = {0};
    troupe_err e = start_node(&np, 0);
    if (e == TROUPE_OK)
        e = start_node(&np, 1);
    troupe_addr ponger;
    troupe_spawn_opts so = TROUPE_SPAWN_OPTS_INIT;
    so.name = "ponger";
    if (e == TROUPE_OK)
        e = troupe_actor_spawn(np.rt[1], &ponger_def, &so, &ponger);
    if (e == TROUPE_OK) {
        printf("nodes: node 1 at %s, node 2 at %s\n",
               troupe_node_url(np.node[0]), troupe_node_url(np.node[1]));
        e = troupe_node_connect(np.node[0], troupe_node_url(np.node[1]));
    }
    if (e == TROUPE_OK)
        e = troupe_node_wait_peer(np.node[0], 2, 5000);
    latch done;
    latch_init(&done, 1);
    double seconds = 0;
    pinger_cfg cfg = {
        .peer_node = 2, .pings = pings, .done = &done, .seconds = &seconds};
    troupe_addr pinger_addr;
    so = TROUPE_SPAWN_OPTS_INIT;
    so.arg = &cfg;
    if (e == TROUPE_OK)
        e = troupe_actor_spawn(np.rt[0], &pinger_def, &so, &pinger_addr);
    if (e == TROUPE_OK)
        e = latch_wait(&done);
    if (e == TROUPE_OK)
        printf("nodes: %ld round trips in %.3f s: %.1f us each, "
               "one ask in flight\n",
               pings, seconds, seconds * 1e6 / (double)pings);
    stop_nodes(&np);
    return e == TROUPE_OK ? 0 : fail("nodes", e);
}
