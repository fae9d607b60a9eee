/*
 * A node for the actor suites that need every built-in actor at once
 * (check_harden.c, check_lanes.c, check_barrier.c, check_coord.c): a
 * runtime of two schedulers, a database, its commit pipeline and catalog,
 * tables "t" (index by_name) and "u" (unique by_email: every write
 * prepares on a worker), queue "q" of two partitions and a kv actor.
 * One per test process (fork mode).
 */
#ifndef TROUPE_TESTS_TNODE_H
#define TROUPE_TESTS_TNODE_H

#include <stdbool.h>

#include "troupe/kv.h"
#include "troupe/queue.h"
#include "troupe/table.h"
#include "troupe/ttl.h"

typedef struct tnode {
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    troupe_catalog *cat;
    troupe_tables *tables;
    troupe_queues *qs;
    troupe_ttl *ttl;     /* a test's; stopped and freed by tnode_close */
    bool tables_stopped; /* by the test: tnode_close only frees them */
    char *dir;
    troupe_addr kv;
} tnode;

/* Opens n with the runtime options o (two schedulers whatever o says),
 * its database in a new temp dir named after tag. */
void
tnode_open(tnode *n, const char *tag, const troupe_runtime_opts *o);
/* Stops and frees everything, removes the dir. */
void
tnode_close(tnode *n);
/* Publishes `count` due events e0.. to "q" with their ids as keys. */
void
tnode_publish(tnode *n, int count);

#endif
