/*
 * The flagship example's parts (main.c says what each shows): what they
 * share, and the entry point of each.
 */
#ifndef TROUPE_EXAMPLES_FLAGSHIP_H
#define TROUPE_EXAMPLES_FLAGSHIP_H

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "troupe/actor.h"
#include "troupe/alloc.h"
#include "troupe/barrier.h"
#include "troupe/commit.h"
#include "troupe/coordinator.h"
#include "troupe/dispatch.h"
#include "troupe/keycodec.h"
#include "troupe/kv.h"
#include "troupe/pack.h"
#include "troupe/queue.h"
#include "troupe/storage.h"
#include "troupe/table.h"
#include "troupe/transport.h"
#include "troupe/txn.h"

/* A tiny completion latch for main (a plain thread, not a loop):
 * latch_wait returns once n hits came, or at the first error (which it
 * returns). */
typedef struct latch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int left;
    troupe_err err;
} latch;

void
latch_init(latch *l, int n);
void
latch_hit(latch *l, troupe_err err);
troupe_err
latch_wait(latch *l);

/* Prints "flagship: what: ..." for e and returns 1 (main's failure). */
int
fail(const char *what, troupe_err e);

/* Part 3's orders per run (part 5's sagas number theirs after them),
 * and the stock a restock brings an item back to. */
enum { SHOP_RUN_ORDERS = 5, RESTOCK = 20 };

/* The integer field k of a msgpack map document (0 when absent or not
 * an integer). */
int64_t
doc_int(const void *doc, size_t len, const char *k);

/* The string field k of a msgpack map document into buf ("" when absent
 * or not a string of at most cap - 1 bytes). */
void
doc_str(const void *doc, size_t len, const char *k, char *buf, size_t cap);

/* Writes the document packed in p with op, then fini's p. `packed` is
 * what the last pack call returned: the packer's error is sticky, so that
 * is the first error of the whole document, if any. */
typedef troupe_err (*write_fn)(troupe_tables *, const char *, const void *,
                               size_t, const void *, size_t,
                               const troupe_write_opts *);
troupe_err
write_doc(troupe_tables *t, write_fn op, const char *table, const void *key,
          size_t klen, troupe_packer *p, troupe_err packed,
          const troupe_write_opts *wo);

/* 5. orders as sagas (saga.c): the coordinator and the branch target over
 * the shop's tables, opened and closed around shop_sagas. */
typedef struct shop_saga {
    troupe_tables *t;
    troupe_target *target;
    troupe_coord *coord;
    /* the handler's calls so far and its null compensations, under mu;
     * each call broadcasts cv */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t calls, nulls;
} shop_saga;
troupe_err
shop_saga_open(troupe_runtime *rt, troupe_tables *t, shop_saga *sg);
void
shop_saga_close(shop_saga *sg);
troupe_err
shop_sagas(shop_saga *sg, int64_t run);

/* 1. the durable counter (main.c), 2. the two nodes (nodes.c), 3.-5. the
 * shop on tables, the queue and sagas (shop.c, saga.c): 0 or 1. */
int
run_counter(const char *dir, int count);
int
flagship_nodes(long pings);
int
run_shop(const char *dir);

#endif
