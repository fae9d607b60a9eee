/*
 * Private to actors/coord: the coordinator object and what its shard
 * actors (shard.c) share with it (coord.c).
 */
#ifndef TROUPE_COORD_INT_H
#define TROUPE_COORD_INT_H

#include <stdatomic.h>

#include "troupe/coordinator.h"
#include "troupe/internal/gtx.h"
#include "troupe/internal/waiter.h"

struct troupe_coord {
    troupe_runtime *rt;
    troupe_tables *tables;
    uint32_t n_shards;
    troupe_addr *shards;
    uint32_t retry_min_ms, retry_max_ms;
    uint32_t branch_timeout_ms; /* an actor target's reply deadline */
    int64_t tcc_timeout_ms;     /* a prepared tcc's, 0: none */
    troupe_clock_fn clock;
    void *clock_arg;
    troupe_sync sync;      /* of every transition: ON or OFF */
    _Atomic int state;     /* 0 running, 1 stopped */
    int64_t retention_ms;  /* of an ended transaction; < 0: for ever */
    troupe__waiter purges; /* the stop's share and 1 per purge (purge.c) */
    /* the stop's share and 1 per table call a shard has in flight (a
     * document's write, an xa branch's resolution): the stop waits for
     * their callbacks, which touch the tables, before it returns and the
     * tables may stop */
    troupe__waiter calls;
};

/* The shard actor's message kinds (local only). */
enum {
    TC_K_SUBMIT = 0, /* ptr: tc_submit */
    TC_K_LOAD,       /* ptr: tc_load, a stored unfinished transaction */
    TC_K_WRITTEN,    /* body: i32 err, u8 insert, gid */
    TC_K_OUTCOME,    /* body: u32 step, u32 op, u32 outcome, gid */
    TC_K_KICK,       /* body: gid: credit is free on its call's target */
    TC_K_TIMER,
    TC_K_OP,    /* ptr: tc_op */
    TC_K_REPLY, /* an actor target's reply (corr: its ask's) */
    TC_K_WFRUN, /* body: u32 outcome, u32 gid length, gid, the run's reply */
    TC_K_N
};

/* How a submit or an op reports its outcome: fn(d, err), exactly once,
 * on the shard's thread (or on the thread that drops its message: err
 * ECLOSED). fn may free what holds d. */
typedef struct tc_done {
    void (*fn)(struct tc_done *d, troupe_err err);
} tc_done;

/* A submit on its way to its shard: the transaction (moved in) and the
 * submitter's completion, fired once with the outcome. */
typedef struct tc_submit {
    tc_done done;
    tc_gtx *g;
    char gid[TROUPE_GID_MAX];
    size_t gid_len;
} tc_submit;

/* A change to a live transaction, on its way to its shard: what, its
 * argument and out-value, and the caller's completion, fired once the
 * change is committed (or with why it was refused). */
typedef enum tc_opkind {
    TC_OP_SUBMIT,
    TC_OP_ABORT,
    TC_OP_RETRY,
    TC_OP_REGISTER,
    TC_OP_FORCE_STOP,
    TC_OP_RESOLVE /* a workflow's awakeable */
} tc_opkind;

typedef struct tc_op {
    tc_done done;
    tc_opkind kind;
    char gid[TROUPE_GID_MAX];
    size_t gid_len;
    /* ABORT: the reason to store, "aborted" or "aborted: " and the
     * operator's */
    char reason[sizeof("aborted: ") + TROUPE_GTX_ABORT_REASON_MAX];
    troupe_gtx_mode mode; /* REGISTER: the transaction's, tcc or xa */
    tc_step branch;       /* REGISTER: the calls, moved in */
    uint32_t branch_no;   /* REGISTER: out, the branch's index; RESOLVE: in,
                             the awakeable's */
    uint32_t want;        /* REGISTER: 0, the next branch; else the
                             caller's branch index + 1 */
    bool resolved;        /* RESOLVE: resolved (else rejected) */
    uint8_t *payload;     /* RESOLVE: the resolution (the op's) */
    size_t payload_len;
    struct tc_op *next; /* the shard's queue */
} tc_op;

typedef struct tc_load {
    tc_gtx *g;
    char gid[TROUPE_GID_MAX];
    size_t gid_len;
} tc_load;

int64_t
troupe__coord_now(const troupe_coord *c);

/* A stored row as a transaction: its key must be a gid and its document
 * one the decoder takes (ECORRUPT, ENOTSUP otherwise). */
troupe_err
troupe__coord_row_decode(const troupe_row *r, tc_gtx **out);

/* purge.c: creates troupe.gtx with its index "finished" (or adds the
 * index to a table stored without it). Blocks. */
troupe_err
troupe__coord_table_create(troupe_tables *t);

/* shard.c: spawns shard i of c. */
troupe_err
troupe__coord_shard_spawn(troupe_coord *c, uint32_t i, troupe_addr *out);

#endif
