/*
 * The crash-loop harness (crash_loop.c) and its workloads (workloads.c).
 *
 * One binary plays both roles: the parent (`crash_loop storage ...`) forks
 * and execs itself as a child workload (`crash_loop child-<name> ...`),
 * with the power-loss or fault shim in LD_PRELOAD, reads what the child
 * reports over a pipe, kills it, restores, and checks the database itself.
 *
 * The pipe carries fixed 16-byte records (a write of 16 bytes to a pipe is
 * atomic, so records from several threads never interleave). An ACK is
 * written only after the commit's completion said OK: what the parent
 * holds is a lower bound on what was acknowledged, which is what a
 * durability check needs.
 */
#ifndef TROUPE_CRASH_H
#define TROUPE_CRASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "troupe/storage.h"

enum crash_rec_type {
    REC_READY = 1,   /* db open, workload starting */
    REC_ACK = 2,     /* id: seq of a commit that completed OK */
    REC_OUT = 3,     /* id: seq, err: its completion (eio child) */
    REC_OPEN = 4,    /* err: troupe_db_open failed */
    REC_FLUSH = 5,   /* err: a troupe_db_flush result */
    REC_REFUSED = 6, /* id: seq, err: submit refused, nothing queued */
    REC_CHECK = 7,   /* id: bitmask of failed fail-stop checks (0: good) */
    REC_CLOSE = 8,   /* err: troupe_db_close */
    REC_HITS = 9,    /* id: calls the fault shim failed */
    REC_DONE = 10,
    REC_QPUB = 11,    /* id: event key of a publish that completed OK */
    REC_QDELIV = 12,  /* id: event key, err: invocation; a handler started */
    REC_QDONE = 13,   /* id: event key, err: invocation; outcome committed */
    REC_GACK = 14,    /* id: gid id, err: the final status it must reach; a
                         global transaction's _wait calls returned OK */
    REC_GBAD = 15,    /* id: gid id (0: none), err: a code; the branch
                         handler saw a violation (described on stderr) */
    REC_GVERDICT = 16 /* id: gid id, err: troupe_barrier_verdict; a branch
                         delivery's business transaction committed */
};

typedef struct crash_rec {
    uint32_t type;
    int32_t err;
    uint64_t id;
} crash_rec;

/* Bits of the REC_CHECK mask. */
#define CHK_FLAG 1    /* troupe_db_failstop was false */
#define CHK_WRITE 2   /* troupe_db_write did not answer EFAILSTOP */
#define CHK_SUBMIT 4  /* troupe_commit_submit did not answer EFAILSTOP */
#define CHK_READ 8    /* a read failed */
#define CHK_NOFIRE 16 /* a completion never fired */

/* Keys: 'k', cycle (8 bytes big-endian), seq (8 bytes big-endian), so a
 * scan returns cycles in order and each cycle's commits in submit order. */
#define CRASH_KEY_LEN 17
void
crash_key(uint8_t *k, uint64_t cycle, uint64_t seq);
/* Deterministic value of (cycle, seq) in family `fam`: 16..175 bytes. */
size_t
crash_val(uint8_t *v, uint64_t cycle, uint64_t seq, int fam);
#define CRASH_VAL_MAX 176

/* The families of the storage workload: every batch puts the same key into
 * "a" and "b" and overwrites "last" in "c" with that key. */
#define CRASH_LAST_KEY "last"
extern const char *const crash_storage_cfs[3];
#define CRASH_KV_CF "kv"

void
crash_report(int fd, uint32_t type, int32_t err, uint64_t id);

/* Child entry points: argv after the subcommand. Return the exit code. */
int
crash_child_storage(int argc, char **argv);
int
crash_child_kv(int argc, char **argv);
int
crash_child_eio(int argc, char **argv);
int
crash_child_model(int argc, char **argv);
int
crash_child_table(int argc, char **argv);
/* Transactions across the three tables; exits 2 when built without
 * actors/txn. */
int
crash_child_table_txn(int argc, char **argv);

/* The table workload's check (tables.c): reopens the db in `dir` after
 * cycle `cycle` (of the transaction workload when `txn`), runs verify over
 * every index of every table, checks every row exactly and that every write
 * acknowledged in `bits` (seqs below `max`) is there. Returns 0, or -1 with the
 * reason in msg. Keeps what it saw for the next cycle's check (the same process
 * must check every cycle in order). */
typedef struct crash_table_stats {
    uint64_t acked;        /* acknowledged writes of the cycle */
    uint64_t lost;         /* of them, not there */
    uint64_t rows;         /* rows in all tables */
    uint64_t verify_steps; /* troupe_index_verify_step calls */
    uint64_t txns;         /* txn: transactions of the cycle present */
} crash_table_stats;
int
crash_table_check(const char *dir, uint64_t cycle, bool txn,
                  const uint8_t *bits, uint64_t max, crash_table_stats *st,
                  char *msg, size_t cap);
void
crash_table_reset(void);

/* The queue workload (queue.c): the child, the parent's bookkeeping of its
 * records (crash_queue_note: 0, or -1 with the reason in msg when a
 * completed invocation is delivered again), and the check after each
 * cycle, which reads the queue's family directly and keeps what it saw
 * for the next check (the same process must check every cycle in order).
 * An event key is cycle << 40 | seq. */
int
crash_child_queue(int argc, char **argv);
typedef struct crash_queue_stats {
    /* from the cycle's records */
    uint64_t published; /* publishes acknowledged */
    uint64_t completed; /* outcomes acknowledged committed */
    uint64_t delivered; /* handler starts */
    uint64_t older;     /* of them, events of earlier cycles */
    /* from the check */
    uint64_t acked;          /* acknowledged publishes of the cycle */
    uint64_t lost;           /* acknowledged publishes not there */
    uint64_t pending_rows;   /* in the queue's family */
    uint64_t completed_rows; /* ... */
    uint64_t entries;        /* owner and id entries */
    uint64_t done_events;    /* events whose last invocation completed */
} crash_queue_stats;
int
crash_queue_note(const crash_rec *r, uint64_t cycle, char *msg, size_t cap);
int
crash_queue_check(const char *dir, uint64_t cycle, crash_queue_stats *st,
                  char *msg, size_t cap);
void
crash_queue_reset(void);

/* The coordinator workload (coord.c): the child (sagas, two-phase
 * messages and TCCs through the coordinator, branches on troupe tables
 * through the barrier), the drain child that drives every stored
 * transaction to its end and checks them all (exits 0, or 1 with the
 * reason on stderr), and the parent's bookkeeping: crash_coord_note keeps
 * an acknowledgement of cycle `cycle` (0, or -1 with the reason in msg
 * for REC_GBAD or a malformed record), crash_coord_write_acks writes them
 * all to `path` for the drain and counts them per kind. A gid id is
 * cycle << 40 | kind << 32 | seq (kind 1 saga, 2 message, 3 TCC). */
int
crash_child_coord(int argc, char **argv);
int
crash_child_coord_drain(int argc, char **argv);
typedef struct crash_coord_stats {
    uint64_t sagas, msgs, tccs, workflows, xas; /* acknowledged */
    /* deliveries committed, by verdict: EXECUTE, NULL_COMPENSATION,
     * DUPLICATED (the drain's own not counted) */
    uint64_t executed, null_comp, duplicated;
    uint64_t older; /* of them, of a transaction an earlier cycle began */
} crash_coord_stats;
int
crash_coord_note(const crash_rec *r, uint64_t cycle, char *msg, size_t cap);
int
crash_coord_write_acks(const char *path, crash_coord_stats *st, char *msg,
                       size_t cap);
void
crash_coord_reset(void);

#endif
