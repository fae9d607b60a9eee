/*
 * libFuzzer target: request bodies at every built-in actor (kv, the
 * table actors of "t" and "u", the index actor of "t", both queue
 * partitions, the TTL scanner) of a real node (fuzz_node.h), sent as
 * another node sends them (troupe_runtime_deliver from peer FZ_PEER) or,
 * for the actors' own kinds, from this node without the payload those
 * kinds expect.
 *
 * Input: target (1 byte), kind (1 byte: 0..31, or one of 63, 64, 100 and
 * 2^32 - 1), flags (1 byte: bit 0 an ask, bit 1 from the peer, bit 2 the
 * REPLY flag set, bit 3 a stale generation), then the body (none when
 * empty).
 *
 * Properties:
 *  - no actor ever fails (a watcher monitors them all);
 *  - every ask from the peer gets exactly one reply, within 10 s (the
 *    count of every recent ask is checked again on later inputs, so a
 *    second reply is caught too);
 *  - a kind the actor does not declare remote is refused with EINVAL, a
 *    stale generation with EDEAD; a declared kind whose body is not one
 *    well-formed msgpack object is EPROTO;
 *  - an OK reply decodes with the client's decoder for it (table reads,
 *    index query, count and verify).
 */
#include <stdatomic.h>
#include <string.h>

#include "fuzz_node.h"
#include "fuzz_support.h"
#include "troupe/alloc.h"
#include "troupe/internal/index.h"
#include "troupe/internal/tables.h"
#include "troupe/pack.h"

static fz_node *N;
static _Atomic int downs;
static uint64_t next_corr = UINT64_C(1) << 48;

#define NTARGETS 7
static troupe_addr targets[NTARGETS];
/* remote kinds by target: kv, t, u, index, 2 partitions, ttl */
static const uint64_t remote[NTARGETS] = {0x7, 0x7f, 0x7f, 0x7, 0, 0, 0};

enum { W_DOWN, W_N };

static troupe_err
w_init(troupe_actor *self, void *st, void *arg)
{
    (void)st;
    (void)arg;
    for (int i = 0; i < NTARGETS; i++) {
        troupe_err e = troupe_monitor(self, targets[i], W_DOWN);
        if (e != TROUPE_OK)
            return e;
    }
    return TROUPE_OK;
}

static troupe_err
w_down(troupe_actor *self, void *st, const troupe_msg *m)
{
    (void)self;
    (void)st;
    (void)m;
    atomic_fetch_add(&downs, 1);
    return TROUPE_OK;
}

static const troupe_handler_fn w_h[W_N] = {[W_DOWN] = w_down};
static const troupe_actor_def watch_def = {
    .name = "watch", .init = w_init, .handlers = w_h, .n_handlers = W_N};

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    N = fz_node_open();
    troupe_addr t[NTARGETS] = {N->kv,      N->table_t, N->table_u, N->index_t,
                               N->part[0], N->part[1], N->ttl_addr};
    memcpy(targets, t, sizeof(t));
    troupe_addr w;
    if (troupe_actor_spawn(N->rt, &watch_def, NULL, &w) != TROUPE_OK)
        fz_fail(__FILE__, __LINE__, "spawn", "no watcher");
    return 0;
}

/* The asks sent lately, checked again for a second reply. */
static uint64_t recent[64];
static size_t nrecent;

static void
check_reply(int target, uint32_t kind, const fz_reply *r)
{
    if (r->err != TROUPE_OK || r->body == NULL)
        return;
    troupe_msg *m = NULL;
    troupe_body *b = troupe_body_retain(r->body);
    if (troupe_msg_create_body(&m, kind, &b) != TROUPE_OK)
        return;
    if ((target == 1 || target == 2) &&
        (kind == TABLE_GET || kind == TABLE_GET_MANY || kind == TABLE_SCAN)) {
        troupe_rows *rows = NULL;
        FZ_ERR_IN(troupe__rows_from_body(r->body, &rows), TROUPE_OK);
        troupe_rows_destroy(rows);
    } else if (target == 3 && kind == TROUPE_INDEX_QUERY) {
        troupe_index_result *res = NULL;
        FZ_ERR_IN(troupe_index_query_reply(m, &res), TROUPE_OK);
        troupe_index_result_destroy(res);
    } else if (target == 3 && kind == TROUPE_INDEX_COUNT) {
        uint64_t n;
        FZ_ERR_IN(troupe_index_count_reply(m, &n), TROUPE_OK);
    } else if (target == 3 && kind == TROUPE_INDEX_VERIFY) {
        void *next = NULL;
        size_t nl;
        bool done;
        FZ_ERR_IN(troupe_index_verify_reply(m, NULL, NULL, &next, &nl, &done),
                  TROUPE_OK);
        troupe_free(next);
    }
    troupe_msg_destroy(m);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint32_t extra[] = {63, 64, 100, UINT32_MAX};
    fz_in in = {data, size};
    int target = fz_u8(&in) % NTARGETS;
    uint8_t k = fz_u8(&in);
    uint32_t kind = k < 0xf0 ? k % 32u : extra[k % 4];
    uint8_t flags = fz_u8(&in);
    bool ask = flags & 1, peer = flags & 2, reply = flags & 4,
         stale = flags & 8;
    size_t bl;
    const uint8_t *body = fz_take(&in, in.n, &bl);

    FZ_CHECK(atomic_load(&downs) == 0, "an actor failed");
    for (size_t i = 0; i < nrecent; i++)
        FZ_CHECK(fz_node_count(recent[i]) == 1, "%u replies to one ask",
                 fz_node_count(recent[i]));

    troupe_msg *m = NULL;
    if (troupe_msg_create(&m, kind, bl ? body : NULL, bl) != TROUPE_OK)
        return 0;
    troupe_addr to = targets[target];
    if (stale)
        to.gen++;
    uint64_t corr = 0;
    if (peer) {
        corr = ask ? ++next_corr : 0;
        m->corr = corr;
        m->flags = reply ? TROUPE_MSG_REPLY : 0;
        m->to = to;
        m->from = (troupe_addr){FZ_PEER, 9, 9};
        (void)troupe_runtime_deliver(N->rt, &m);
    } else {
        /* from this node: replies go nowhere, only survival counts */
        m->corr = ask ? ++next_corr : 0;
        (void)troupe_runtime_send(N->rt, to, &m);
    }
    FZ_CHECK(m == NULL, "message not consumed");
    if (!peer || !ask || reply)
        return 0;

    fz_reply r = fz_node_wait(corr, 1, 10000);
    FZ_CHECK(r.count == 1, "%u replies to an ask of kind %u at target %d",
             r.count, kind, target);
    FZ_CHECK(r.flags & TROUPE_MSG_REPLY, "a non-reply answered the ask");
    FZ_CHECK(strcmp(troupe_err_name(r.err), "?") != 0, "unknown error %d",
             (int)r.err);
    bool declared = kind < 64 && (remote[target] >> kind & 1);
    if (stale)
        FZ_CHECK(r.err == TROUPE_EDEAD, "stale generation: %s",
                 troupe_err_name(r.err));
    else if (!declared)
        FZ_CHECK(r.err == TROUPE_EINVAL, "local-only kind %u: %s", kind,
                 troupe_err_name(r.err));
    else {
        troupe_reader rd;
        bool well_formed =
            bl > 0 && troupe_reader_init(&rd, body, bl) == TROUPE_OK;
        if (!well_formed)
            FZ_CHECK(r.err == TROUPE_EPROTO, "malformed body: %s",
                     troupe_err_name(r.err));
        check_reply(target, kind, &r);
    }
    troupe_body_release(r.body);
    if (nrecent == sizeof(recent) / sizeof(recent[0])) {
        memmove(recent, recent + 1, (nrecent - 1) * sizeof(recent[0]));
        nrecent--;
        /* what the peer keeps stays bounded: only the recent asks */
        fz_node_forget(recent[0]);
    }
    recent[nrecent++] = corr;
    return 0;
}
