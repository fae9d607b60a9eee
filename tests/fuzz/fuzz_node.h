/*
 * A node for the stateful fuzz targets (fuzz_cursor, fuzz_actors): a
 * runtime of 2 schedulers and 2 workers, a RocksDB in a temporary
 * directory (unsynced: the fuzzer writes a lot), tables "t" (indexes
 * by_name: string "name", by_age: int "age") and "u" (unique by_email),
 * a queue "q" of 2 partitions, a kv actor and a TTL scanner, with rows
 * and events in them. Opened once per process (LLVMFuzzerInitialize) and
 * never closed: the process ends with the fuzzer.
 *
 * The runtime's remote hook stands in for a peer node (FZ_PEER): every
 * message the node sends there is counted per correlation id, so a
 * target can wait for the one reply an ask from that peer must get.
 */
#ifndef TROUPE_FUZZ_NODE_H
#define TROUPE_FUZZ_NODE_H

#include "troupe/kv.h"
#include "troupe/queue.h"
#include "troupe/table.h"
#include "troupe/ttl.h"
#include "troupe/txn.h"

#define FZ_PEER 7u

typedef struct fz_node {
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    troupe_tables *tables;
    troupe_queues *qs;
    troupe_ttl *ttl;
    troupe_addr kv, table_t, table_u, index_t, part[2], ttl_addr;
    uint64_t t_id, by_name_id, by_age_id, q_id;
} fz_node;

/* Opens the node (aborts on failure). */
fz_node *
fz_node_open(void);

/* What reached the peer for one correlation id. */
typedef struct fz_reply {
    unsigned count;
    troupe_err err;
    uint32_t flags;
    troupe_body *body; /* the first reply's, retained; NULL if none */
} fz_reply;

/* Waits until at least `want` messages with corr reached the peer, or
 * timeout_ms passes; returns what arrived (body retained: release it). */
fz_reply
fz_node_wait(uint64_t corr, unsigned want, unsigned timeout_ms);
/* Messages with corr that reached the peer so far (no waiting). */
unsigned
fz_node_count(uint64_t corr);
/* Forgets what reached the peer for correlation ids below `below`. */
void
fz_node_forget(uint64_t below);
/* Forgets what reached the peer. */
void
fz_node_clear(void);

#endif
