/*
 * The node behind troupe_abi (private to bindings/c): what open and start
 * assemble, the calls in progress and the requests in flight that close
 * waits for, and the integer-id tables of transactions and
 * subscriptions.
 *
 * Files: node.c (open, start, close, limits), errmsg.c (the thread's
 * message), request.c (a request's reservation and its completion),
 * pull.c (targets, pulls, replies, wake), table.c (rows and index
 * queries), spec.c (index specs from msgpack), pack.c (results to
 * msgpack), txn.c (transactions), queue.c (queues), actor.c (actors the
 * host serves, asks by name), coord.c (the coordinator's requests and the
 * barrier).
 */
#ifndef TROUPE_ABI_NODE_H
#define TROUPE_ABI_NODE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <msgpack.h>

#include "troupe/abi.h"
#include "troupe/barrier.h"
#include "troupe/catalog.h"
#include "troupe/commit.h"
#include "troupe/coordinator.h"
#include "troupe/hostactor.h"
#include "troupe/internal/dispatch.h"
#include "troupe/queue.h"
#include "troupe/storage.h"
#include "troupe/table.h"
#include "troupe/txn.h"

enum { NODE_OPEN = 0, NODE_STARTED, NODE_CLOSING };

/* The threads that run the coordinator's blocking calls (coord.c). */
#define COORD_THREADS 4

struct coord_job;

typedef struct abi_txn {
    uint64_t id;
    troupe_txn *tx;
    bool committing; /* its commit runs: only its end job touches it */
    bool checking;   /* a barrier check runs on it (coord.c) */
} abi_txn;

struct troupe_abi {
    troupe_sync sync;
    troupe_db *db;
    troupe_commit *commit;
    troupe_runtime *rt;
    troupe_host *host;
    troupe_catalog *cat;
    troupe_tables *tables;
    troupe_queues *queues;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int state;        /* mu */
    unsigned calls;   /* mu: calls in progress (abi_enter .. abi_leave) */
    uint64_t pending; /* mu: requests whose callback has not finished */
    troupe_target **targets; /* mu */
    size_t ntargets, targets_cap;
    troupe_queue_worker **workers; /* mu */
    size_t nworkers, workers_cap;
    troupe_host_actor **actors; /* mu */
    size_t nactors, actors_cap;
    abi_txn *txns; /* mu */
    size_t ntxns, txns_cap;
    uint64_t txn_seq;
    /* coord.c: opened at start, closed at close before the tables */
    troupe_coord_opts coord_opts; /* mu; set before start */
    troupe_coord *coord;
    struct coord_job *jobs, *jobs_tail; /* mu: queued for the threads */
    bool jobs_stop;                     /* mu */
    pthread_cond_t jobs_cond;
    pthread_t threads[COORD_THREADS];
    size_t nthreads;
};

/* errmsg.c: every entry point returns through abi_ret, which records the
 * thread's message for troupe_abi_errmsg; abi_clear starts a call. */
void
abi_clear(void);
int
abi_ret(troupe_err e);

/* node.c: a call on n: ECLOSED when closing, ESTATE when `started` is
 * required and start has not run; then abi_leave once done. */
troupe_err
abi_enter(troupe_abi *n, bool started, const char *call);
void
abi_leave(troupe_abi *n);

/* request.c: one request in flight. */
typedef struct abi_req {
    troupe_abi *n;
    troupe__completion *c;
    uint64_t txn; /* a transaction's commit: the id to end */
} abi_req;

/* Reserves the completion of request id (EBUSY, ECLOSED, ENOMEM). */
troupe_err
abi_req_open(troupe_abi *n, uint64_t id, abi_req **out);
/* The call was refused after all: no completion. */
void
abi_req_cancel(abi_req *r);
/* Posts the completion (body copied) and frees r. */
void
abi_req_done(abi_req *r, troupe_err status, const void *body, size_t len);
/* A request call: abi_req_begin checks n (EINVAL for NULL), enters it
 * (started) and opens the request; abi_req_end leaves the node after the
 * call e returned, cancelling the request when e is an error, and
 * returns e through abi_ret. */
troupe_err
abi_req_begin(troupe_abi *n, uint64_t id, const char *call, abi_req **r);
int
abi_req_end(troupe_abi *n, abi_req *r, troupe_err e);
/* A read's callback (arg the request): OK with one row completes with
 * its document, OK with none with ENOENT. */
void
abi_req_got(troupe_err err, troupe_rows *rows, void *arg);
/* Completes with sb's bytes (err OK) or err and no body; destroys sb. */
void
abi_req_done_packed(abi_req *r, troupe_err err, msgpack_sbuffer *sb);
/* The node's request count, from the request's callback on: close waits
 * for it. */
void
abi_pending_add(troupe_abi *n);
void
abi_pending_sub(troupe_abi *n);

/* pack.c: results as msgpack (ENOMEM when the buffer cannot grow). */
troupe_err
abi_pack_rows(const troupe_rows *rows, msgpack_sbuffer *sb);
troupe_err
abi_pack_hits(const troupe_index_result *res, msgpack_sbuffer *sb);
troupe_err
abi_pack_conflicts(const troupe_txn_conflict *c, size_t n, msgpack_sbuffer *sb);

/* spec.c: index specs from a msgpack array (EPROTO, EINVAL, ENOMEM);
 * abi_specs_free frees what abi_specs_parse made. */
typedef struct abi_specs {
    troupe_index_spec *specs;
    size_t n;
    troupe_index_field *fields;
    char *strings;
} abi_specs;
troupe_err
abi_specs_parse(const void *buf, size_t len, abi_specs *out);
void
abi_specs_free(abi_specs *s);

/* txn.c: after the callback that ended transaction r->txn (a commit's,
 * an xa prepare's) posted r's completion: the transaction is destroyed
 * on scheduler 0 (not inside its own callback), then r freed and counted
 * done. */
void
abi_txn_end(abi_req *r);
/* txn.c: destroys every open transaction (close, no commit running). */
void
abi_txns_free(troupe_abi *n);
/* txn.c: looks txn up for a call: on OK n->mu is held (the caller
 * unlocks); ENOENT (none open), ESTATE (committing, or a barrier check
 * runs on it). */
troupe_err
abi_txn_lookup(troupe_abi *n, uint64_t txn, const char *call, abi_txn **x);
/* txn.c: the open transaction id (n->mu held), or NULL. */
abi_txn *
abi_txn_find(troupe_abi *n, uint64_t id);

/* coord.c: the barrier's table and the coordinator, at start (after the
 * tables); closing joins its threads and stops it (after every request
 * ended, before the tables stop). Close of a node without one: no-op. */
troupe_err
abi_coord_open(troupe_abi *n);
void
abi_coord_close(troupe_abi *n);

#endif
