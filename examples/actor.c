/*
 * actor: an actor of your own on the host's libuv loop.
 *
 *   actor
 *
 * A counter actor with two message kinds: ADD (body: one msgpack integer)
 * adds to its total, GET (an ask) replies with the total. The host sends
 * it 1, 2 and 3 from outside any actor, asks for the total, prints it, and
 * shuts the runtime down from the reply callback; uv_run then returns by
 * itself. Messages from one sender arrive in the order they were sent, so
 * the ask sees all three adds. Exits 0 when the total is 6.
 */
#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#include <troupe/troupe.h>

enum { ADD = 0, GET = 1 };

typedef struct counter {
    int64_t total;
} counter;

/* Handlers run on the actor's scheduler (here the host's loop) and borrow
 * the message; an error return fails the actor. */
static troupe_err
on_add(troupe_actor *self, void *state, const troupe_msg *msg)
{
    counter *c = state;
    troupe_reader r;
    int64_t v = 0;
    troupe_reader_init_msg(&r, msg);
    troupe_read_int(&r, &v);
    if (troupe_read_end(&r) != TROUPE_OK)
        return TROUPE_OK; /* hostile or broken input: ignore it */
    c->total += v;
    return TROUPE_OK;
}

static troupe_err
on_get(troupe_actor *self, void *state, const troupe_msg *msg)
{
    counter *c = state;
    troupe_packer p;
    troupe_msg *reply = NULL;
    troupe_pack_init(&p);
    troupe_pack_int(&p, c->total);
    troupe_err e = troupe_pack_take_msg(&p, GET, &reply);
    return e == TROUPE_OK ? troupe_reply(self, msg, &reply) : e;
}

static const troupe_handler_fn counter_handlers[] = {
    [ADD] = on_add, [GET] = on_get};
static const troupe_actor_def counter_def = {
    .name = "counter",
    .state_size = sizeof(counter),
    .handlers = counter_handlers,
    .n_handlers = 2,
};

typedef struct host {
    int64_t total;
    troupe_err err;
} host;

static void
on_shutdown(troupe_runtime *rt, void *arg)
{
}

/* Runs on scheduler 0, the host's loop; borrows reply. */
static void
on_total(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    host *h = arg;
    troupe_reader r;
    if (err == TROUPE_OK && troupe_reader_init_msg(&r, reply) == TROUPE_OK &&
        troupe_read_int(&r, &h->total) == TROUPE_OK)
        err = troupe_read_end(&r);
    h->err = err;
    troupe_runtime_shutdown(rt, on_shutdown, h);
}

static troupe_err
send_add(troupe_runtime *rt, troupe_addr to, int64_t v)
{
    troupe_packer p;
    troupe_msg *m = NULL;
    troupe_pack_init(&p);
    troupe_pack_int(&p, v);
    troupe_err e = troupe_pack_take_msg(&p, ADD, &m);
    return e == TROUPE_OK ? troupe_runtime_send(rt, to, &m) : e;
}

int
main(void)
{
    uv_loop_t loop;
    if (uv_loop_init(&loop) != 0)
        return 1;
    host h = {.err = TROUPE_OK};
    troupe_runtime *rt = NULL;
    troupe_runtime_opts ro = {.loop = &loop, .schedulers = 1};
    troupe_err e = troupe_runtime_create(&rt, &ro);
    if (e != TROUPE_OK) {
        fprintf(stderr, "actor: runtime: %s\n", troupe_err_name(e));
        return 1;
    }
    troupe_addr counter_addr;
    troupe_spawn_opts so = TROUPE_SPAWN_OPTS_INIT;
    e = troupe_actor_spawn(rt, &counter_def, &so, &counter_addr);
    for (int64_t v = 1; v <= 3 && e == TROUPE_OK; v++)
        e = send_add(rt, counter_addr, v);
    troupe_msg *ask = NULL;
    if (e == TROUPE_OK)
        e = troupe_msg_create(&ask, GET, NULL, 0);
    if (e == TROUPE_OK)
        e = troupe_runtime_ask(rt, counter_addr, &ask, 1000, on_total, &h);
    if (e != TROUPE_OK) {
        h.err = e;
        troupe_runtime_shutdown(rt, on_shutdown, &h);
    }
    uv_run(&loop, UV_RUN_DEFAULT); /* returns once the runtime shut down */
    troupe_runtime_destroy(rt);
    if (uv_loop_close(&loop) != 0 || h.err != TROUPE_OK) {
        fprintf(stderr, "actor: %s\n", troupe_err_name(h.err));
        return 1;
    }
    printf("counter total: %lld\n", (long long)h.total);
    return h.total == 6 ? 0 : 1;
}
